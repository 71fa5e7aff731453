"""Pick the data parser: the newest version both slurmrestd and the bridge know."""

import re

from bridge.slurm.errors import SlurmProtocolError

_SLURM_PATH = re.compile(r"^/slurm/(v\d+\.\d+\.\d+)/")


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.lstrip("v").split("."))


def at_least(version: str, oldest: str) -> bool:
    """``version`` is ``oldest`` or newer (``v0.0.45`` ≥ ``v0.0.44``)."""
    return _key(version) >= _key(oldest)


def offered_versions(openapi: object) -> set[str]:
    """Versions under ``/slurm/`` in the server's ``/openapi/v3`` document."""
    paths = openapi.get("paths") if isinstance(openapi, dict) else None
    if not isinstance(paths, dict):
        raise SlurmProtocolError("slurmrestd /openapi/v3 has no 'paths': is this slurmrestd?")
    return {m.group(1) for p in paths if (m := _SLURM_PATH.match(p))}


def choose(offered: set[str], known: set[str], pinned: str | None = None) -> str:
    if pinned:
        if pinned not in known:
            raise SlurmProtocolError(
                f"data parser {pinned} is not one the bridge speaks ({', '.join(sorted(known))})"
            )
        if pinned not in offered:
            raise SlurmProtocolError(
                f"data parser {pinned} is not offered by this slurmrestd "
                f"(it offers {', '.join(sorted(offered, key=_key)) or 'none'})"
            )
        return pinned
    common = offered & known
    if not common:
        raise SlurmProtocolError(
            "no common slurmrestd data parser: server offers "
            f"{', '.join(sorted(offered, key=_key)) or 'none'}, the bridge speaks "
            f"{', '.join(sorted(known, key=_key))}; upgrade one side"
        )
    return max(common, key=_key)
