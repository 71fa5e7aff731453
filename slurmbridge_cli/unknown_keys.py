"""An unknown settings key at its full dotted path with the nearest valid name at that place:
most unknown keys are typos, and a typo must stop the start, never widen a default."""

import difflib
from collections.abc import Sequence
from types import UnionType
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel

REFERENCE = "docs/configuration.md lists every setting"


def _model(kind: Any) -> type[BaseModel] | None:
    """The section ``kind`` is (an optional one's too), or None."""
    if get_origin(kind) in (Union, UnionType):
        return next((m for a in get_args(kind) if (m := _model(a)) is not None), None)
    return kind if isinstance(kind, type) and issubclass(kind, BaseModel) else None


def valid_keys(model: type[BaseModel], parents: tuple[int | str, ...]) -> list[str]:
    """The keys ``model`` accepts below ``parents`` (none where the path leaves the models;
    a dict's keys are free)."""
    kind: Any = model
    for part in parents:
        if get_origin(kind) is dict:
            kind = get_args(kind)[1]
            continue
        section = _model(kind)
        field = section.model_fields.get(str(part)) if section is not None else None
        if field is None:
            return []
        kind = field.annotation
    section = _model(kind)
    return list(section.model_fields) if section is not None else []


def unknown_key(model: type[BaseModel], loc: Sequence[int | str]) -> str:
    """The key at ``loc``, which ``model`` does not have, with the nearest valid name there."""
    known = valid_keys(model, tuple(loc[:-1]))
    nearest = difflib.get_close_matches(str(loc[-1]), known, n=1)
    hint = f"did you mean {nearest[0]}?" if nearest else f"valid here: {', '.join(known)}"
    return f"{'.'.join(map(str, loc))}: unknown key; {hint} ({REFERENCE})"
