"""Settings load from the environment and YAML; the reference doc matches the models."""

from pathlib import Path

import pytest

from bridge.config import CONFIG_FILE_ENV, Settings
from slurmbridge_cli.config_reference import markdown

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
