"""The settings of one ``slurmbridge`` command, or one line saying which setting (or which
line and column of the settings file) is wrong and how to fix it.  Any check of the settings
models (bridge/config.py) reaches the user through ``describe``."""

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TypeGuard

import yaml
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails
from pydantic_settings import SettingsError

from bridge.config import CONFIG_FILE_ENV, Settings
from slurmbridge_cli.failures import Failure
from slurmbridge_cli.unknown_keys import unknown_key


def load_settings(config: Path | None) -> Settings:
    """``config`` (``--config``), else the file of ``SLURMBRIDGE_CONFIG_FILE``, under the
    environment's ``SLURMBRIDGE_*``."""
    if config is not None:
        os.environ[CONFIG_FILE_ENV] = str(config)
    if path := os.environ.get(CONFIG_FILE_ENV):
        _check_file(Path(path))
    try:
        return Settings()
    except ValidationError as exc:
        raise Failure("invalid settings: " + "; ".join(map(describe, exc.errors()))) from exc
    except SettingsError as exc:  # a list or mapping in the environment that is not JSON
        raise Failure(f"invalid settings: {exc}: a list or mapping in SLURMBRIDGE_* is JSON, "
                      """e.g. SLURMBRIDGE_ADMISSION__ENROLLED_NAMESPACES='["ml"]'""") from exc
    except ValueError as exc:  # bridge/config.py: the settings file gone since _check_file
        raise Failure(f"invalid settings: {exc}") from exc


def _check_file(path: Path) -> None:
    """YAML that does not parse, or is not a mapping of sections, named where it goes wrong."""
    try:
        loaded = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise Failure(f"settings file {path}: {exc.strerror} (--config or {CONFIG_FILE_ENV})"
                      ) from exc
    except yaml.MarkedYAMLError as exc:
        raise Failure(f"settings file {path}{_at(exc.problem_mark, ',')}: {exc.problem}"
                      + (f" ({exc.context}{_at(exc.context_mark, ' at')})" if exc.context else "")
                      + ": fix the YAML there") from exc
    except yaml.YAMLError as exc:
        raise Failure(f"settings file {path}: not YAML ({exc})") from exc
    if loaded is not None and not isinstance(loaded, dict):
        raise Failure(f"settings file {path}: expected a mapping of sections "
                      "(slurm:, kube:, ...), as in docs/configuration.md")


def _at(mark: yaml.Mark | None, joint: str) -> str:
    return f"{joint} line {mark.line + 1}, column {mark.column + 1}" if mark else ""


def _env(path: Sequence[int | str]) -> str:
    return "SLURMBRIDGE_" + "__".join(str(p).upper() for p in path)


def describe(error: ErrorDetails) -> str:
    """One settings error: the setting's dotted name, its environment variable, the fix."""
    loc = error["loc"]
    if error["type"] == "extra_forbidden":
        return unknown_key(Settings, loc)
    if error["type"] == "missing":
        return "; ".join(_required(path) for path in _required_paths(Settings, list(loc)))
    message = error["msg"].removeprefix("Value error, ")
    got = error.get("input")
    if error["type"] != "value_error" and isinstance(got, str | int | float | bool):
        message += f", got {got!r}"
    return f"{'.'.join(map(str, loc))} ({_env(loc)}): {message}"


def _required(path: list[int | str]) -> str:
    field = _field(Settings, path)
    meaning = f": {field.description}" if field is not None and field.description else ""
    return (f"{'.'.join(map(str, path))} is required{meaning} (set it in the settings file "
            f"or {_env(path)})")


def _field(model: type[BaseModel], path: list[int | str]) -> FieldInfo | None:
    """The field at ``path`` (section by section), None past a non-model."""
    field = model.model_fields.get(str(path[0]))
    if field is None or len(path) == 1:
        return field
    kind = field.annotation
    return _field(kind, path[1:]) if _is_model(kind) else None


def _is_model(kind: object) -> TypeGuard[type[BaseModel]]:
    return isinstance(kind, type) and issubclass(kind, BaseModel)


def _required_paths(model: type[BaseModel], path: list[int | str]) -> list[list[int | str]]:
    """A missing section stands for the settings it must hold: ``slurm`` for ``slurm.url``."""
    field = _field(model, path)
    kind = field.annotation if field is not None else None
    if not _is_model(kind):
        return [path]
    return [p for name, sub in kind.model_fields.items() if sub.is_required()
            for p in _required_paths(model, [*path, name])] or [path]
