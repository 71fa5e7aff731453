"""Times as ``kubectl get`` shows them."""

from datetime import datetime


def age(since: datetime | None, now: datetime) -> str:
    """``kubectl get``'s AGE: the largest whole unit (``3m``, ``2h``), ``?`` when unknown."""
    if since is None:
        return "?"
    seconds = max(0, int((now - since).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def iso(when: datetime | None) -> str | None:
    return when.isoformat().replace("+00:00", "Z") if when else None
