"""Settings load from the environment and YAML; the reference doc matches the models."""

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args, get_origin

import click
import pytest
from pydantic import BaseModel, ValidationError

from bridge.config import CONFIG_FILE_ENV, Settings
from slurmbridge_cli.config_reference import markdown
from slurmbridge_cli.settings_load import load_settings

REPO = Path(__file__).resolve().parents[2]


def test_configuration_doc_is_generated_from_the_models() -> None:
    doc = (REPO / "docs" / "configuration.md").read_text()
    assert doc == markdown(), "regenerate: slurmbridge config-reference > docs/configuration.md"


def test_environment_beats_yaml_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "settings.yaml"
    config.write_text("slurm:\n  url: http://from-file:6820\n  user: alice\n")
    monkeypatch.setenv(CONFIG_FILE_ENV, str(config))
    monkeypatch.setenv("SLURMBRIDGE_SLURM__URL", "http://from-env:6820")
    settings = Settings()
    assert settings.slurm.url == "http://from-env:6820"
    assert settings.slurm.user == "alice"


def test_a_typo_fails_with_the_settings_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "settings.yaml"
    config.write_text("slurm:\n  retries: many\n")
    monkeypatch.setenv(CONFIG_FILE_ENV, str(config))
    with pytest.raises(ValueError, match="retries"):
        Settings()


def test_missing_config_file_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CONFIG_FILE_ENV, "/nonexistent/settings.yaml")
    with pytest.raises(ValueError, match=r"/nonexistent/settings\.yaml"):
        Settings()


def _sections(model: type[BaseModel], path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """The path of every nested section of ``model``; a dict of sections by one key, "x"."""
    for name, field in model.model_fields.items():
        kind, inner = field.annotation, (*path, name)
        if get_origin(kind) is dict:
            kind, inner = get_args(kind)[1], (*inner, "x")
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            yield inner
            yield from _sections(kind, inner)


def _nested(path: tuple[str, ...], leaf: dict[str, Any]) -> dict[str, Any]:
    return leaf if not path else {path[0]: _nested(path[1:], leaf)}


@pytest.mark.parametrize("section", [".".join(p) for p in _sections(Settings)])
def test_an_unknown_key_in_any_section_is_refused(section: str) -> None:
    """Issue 41, case 8: only the top level refused unknown keys; a nested typo was dropped."""
    values = _nested(tuple(section.split(".")), {"tpyo": 1})
    values.setdefault("slurm", {})["url"] = "http://slurmctl.example.org:6820"  # required
    with pytest.raises(ValidationError) as raised:
        Settings(**values)
    assert [(e["type"], ".".join(map(str, e["loc"]))) for e in raised.value.errors()] == [
        ("extra_forbidden", f"{section}.tpyo")]


def _typo_file(tmp_path: Path) -> Path:
    config = tmp_path / "settings.yaml"
    config.write_text("admission:\n  default_policy:\n    acounts: [x]\n")
    return config


def test_a_nested_typo_is_one_line_naming_its_path_and_the_nearest_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``admission.default_policy.acounts`` loaded, and the namespace's accounts fell back to
    the default: any account."""
    monkeypatch.setenv(CONFIG_FILE_ENV, "unset")  # restored after load_settings sets it
    with pytest.raises(click.ClickException) as raised:
        load_settings(_typo_file(tmp_path))
    message = raised.value.format_message()
    assert "\n" not in message, message
    assert re.search(r"admission\.default_policy\.acounts\b.*\baccounts\b", message), message


def test_the_nearest_name_is_found_under_a_namespace_of_its_own(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = tmp_path / "settings.yaml"
    config.write_text("admission:\n  policies:\n    ml:\n      max_prority: 5\n")
    monkeypatch.setenv(CONFIG_FILE_ENV, "unset")
    with pytest.raises(click.ClickException, match=r"admission\.policies\.ml\.max_prority\b.*"
                       r"\bmax_priority\b"):
        load_settings(config)


@pytest.mark.parametrize("command", ["extender", "webhook", "status", "doctor"])
def test_every_command_refuses_a_nested_typo_in_one_line_without_a_traceback(
    tmp_path: Path, command: str
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURMBRIDGE_")}
    done = subprocess.run(
        [sys.executable, "-m", "slurmbridge_cli", "--config", str(_typo_file(tmp_path)),
         command], capture_output=True, text=True, timeout=60, check=False, env=env, cwd=REPO,
    )
    said = done.stdout + done.stderr
    assert done.returncode != 0, said
    assert "Traceback" not in said, said
    assert len(said.strip().splitlines()) == 1, said
    assert re.search(r"admission\.default_policy\.acounts\b.*\baccounts\b", said), said
