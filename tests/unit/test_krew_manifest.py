"""The krew manifest (plugins/slurmbridge.yaml) has what krew requires, and its archive is the
one plugins/archive.py builds from the launcher: same bytes, same version as the package."""

import hashlib
import re
import stat
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
MANIFEST = REPO / "plugins" / "slurmbridge.yaml"


def _manifest() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(MANIFEST.read_text())
    return loaded


def _version() -> str:
    project: dict[str, str] = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return project["version"]


def test_the_manifest_has_every_field_krew_requires() -> None:
    manifest = _manifest()
    assert manifest["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2"
    assert manifest["kind"] == "Plugin"
    assert manifest["metadata"]["name"] == MANIFEST.stem == "slurmbridge"  # kubectl slurmbridge
    spec = manifest["spec"]
    assert spec["version"] == f"v{_version()}"  # semver with krew's leading v
    assert spec["homepage"].startswith("https://")
    assert 0 < len(spec["shortDescription"]) <= 50, "krew's index wants a few words"
    assert spec["description"].strip() and spec["caveats"].strip()
    assert spec["platforms"]
    for platform in spec["platforms"]:
        assert platform["selector"]["matchExpressions"] or platform["selector"]["matchLabels"]
        assert platform["uri"].startswith("https://") and platform["uri"].endswith(".zip")
        assert re.fullmatch(r"[0-9a-f]{64}", platform["sha256"])
        assert platform["bin"] == "kubectl-slurmbridge"


def test_the_archive_is_the_launcher_of_this_version(tmp_path: Path) -> None:
    built = subprocess.run([sys.executable, str(REPO / "plugins" / "archive.py"), str(tmp_path)],
                           capture_output=True, text=True, check=True).stdout.split()
    archive, sha256 = Path(built[0]), built[1]
    assert hashlib.sha256(archive.read_bytes()).hexdigest() == sha256
    for platform in _manifest()["spec"]["platforms"]:
        assert platform["sha256"] == sha256, "rebuild the archive: python3 plugins/archive.py"
        assert platform["uri"].endswith(f"/v{_version()}/{archive.name}")
    with zipfile.ZipFile(archive) as zf:
        (entry,) = zf.infolist()
        assert entry.filename == "kubectl-slurmbridge"
        assert stat.S_IMODE(entry.external_attr >> 16) == 0o755
        assert "slurmbridge-k8s==$version" in zf.read(entry).decode()
    assert f"version={_version()}\n" in (REPO / "plugins" / "kubectl-slurmbridge").read_text()


def test_the_launcher_runs_the_plugin_of_its_virtualenv(tmp_path: Path) -> None:
    """Once installed (the first run's pip install), each run is the package's own command."""
    plugin = tmp_path / "kubectl-slurmbridge" / _version() / "bin" / "kubectl-slurmbridge"
    plugin.parent.mkdir(parents=True)
    plugin.write_text('#!/bin/sh\necho "plugin $*"\n')
    plugin.chmod(0o755)
    done = subprocess.run([str(REPO / "plugins" / "kubectl-slurmbridge"), "why", "-n", "ml", "p"],
                          env={"XDG_CACHE_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, check=True)
    assert done.stdout == "plugin why -n ml p\n" and done.stderr == ""
