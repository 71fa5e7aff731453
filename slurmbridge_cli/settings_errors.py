"""What is wrong with the settings, in one line: each error at its full dotted path, and for
an unknown key the nearest valid name at that place (most unknown keys are typos), so a
start fails readably, never with a traceback."""

import difflib
from types import UnionType
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

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


def _problem(model: type[BaseModel], error: ErrorDetails) -> str:
    path = ".".join(str(part) for part in error["loc"]) or "(the whole file)"
    if error["type"] != "extra_forbidden":
        return f"{path}: {error['msg']}"
    known = valid_keys(model, error["loc"][:-1])
    nearest = difflib.get_close_matches(str(error["loc"][-1]), known, n=1)
    if nearest:
        return f"{path}: unknown key; did you mean {nearest[0]}?"
    return f"{path}: unknown key; valid here: {', '.join(known)}"


def settings_problem(model: type[BaseModel], exc: ValidationError) -> str:
    """``exc`` from loading ``model``, as one line."""
    return f"invalid settings: {'; '.join(_problem(model, e) for e in exc.errors())} ({REFERENCE})"
