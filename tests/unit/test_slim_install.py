"""``pip install slurmbridge-k8s`` brings what ``kubectl slurmbridge`` needs and nothing of the
servers' stack; ``[server]`` brings the rest (the image and the dev kit install it).

Each command runs in a process where every installed distribution outside the install in
question cannot be imported, as on a machine where only that install was made."""

import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from slurmbridge_devkit.kubeconfigs import unreachable_kubeconfig

REPO = Path(__file__).resolve().parents[2]
SERVER_STACK = {"fastapi", "starlette", "uvicorn", "aiohttp", "pyreqwest", "pydantic-settings"}

# Run in the child before anything else: the distributions of ``EXTRAS`` (base: none) and
# what they require, recursively; any other installed distribution's modules refuse to import.
_ONLY_THE_INSTALL = textwrap.dedent('''
    import importlib.abc, importlib.metadata as md, re, sys, tomllib
    from packaging.requirements import Requirement

    def norm(name):
        return re.sub(r"[-_.]+", "-", name).lower()

    def closure(requirements):
        seen, todo = set(), [Requirement(r) for r in requirements]
        while todo:
            req = todo.pop()
            if norm(req.name) in seen:
                continue
            seen.add(norm(req.name))
            for line in md.requires(req.name) or []:
                sub = Requirement(line)
                if sub.marker is None or any(sub.marker.evaluate({"extra": e})
                                             for e in ["", *req.extras]):
                    todo.append(sub)
        return seen

    project = tomllib.load(open(PYPROJECT, "rb"))["project"]
    wanted = project["dependencies"] + [
        r for extra in EXTRAS for r in project["optional-dependencies"][extra]]
    installed = closure(wanted)
    blocked = {module for module, dists in md.packages_distributions().items()
               if not any(norm(d) in installed for d in dists)
               and module not in ("bridge", "extender", "admission", "slurmbridge_cli")}

    class NotInstalled(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in blocked:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, NotInstalled())
''')


def _closure(extras: list[str]) -> set[str]:
    scope: dict[str, object] = {"PYPROJECT": str(REPO / "pyproject.toml"), "EXTRAS": extras}
    exec(_ONLY_THE_INSTALL.replace("sys.meta_path.insert(0, NotInstalled())", ""), scope)
    installed: set[str] = scope["installed"]  # type: ignore[assignment]
    return installed


def _run(extras: list[str], code: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    prelude = f"PYPROJECT = {str(REPO / 'pyproject.toml')!r}\nEXTRAS = {extras!r}\n"
    return subprocess.run(
        [sys.executable, "-c", prelude + _ONLY_THE_INSTALL + textwrap.dedent(code), *args],
        capture_output=True, text=True, timeout=60, check=False, cwd=cwd,
        env={"PATH": "/usr/bin:/bin", "HOME": str(cwd), "PYTHONPATH": str(REPO)},
    )


PLUGIN = """
    sys.argv = ["kubectl-slurmbridge", *sys.argv[1:]]
    from slurmbridge_cli.kubectl import main
    try:
        main()
    finally:
        print("IMPORTED", sorted({m.partition(".")[0] for m in sys.modules}), file=sys.stderr)
"""
SLURMBRIDGE = """
    sys.argv = ["slurmbridge", *sys.argv[1:]]
    from slurmbridge_cli.launch import main
    main()
"""


def test_installing_the_plugin_pulls_none_of_the_server_stack() -> None:
    assert _closure([]) & SERVER_STACK == set()
    assert _closure(["server"]) >= SERVER_STACK



@pytest.mark.parametrize(("args", "code", "says"), [
    (["--help"], 0, "Usage: kubectl-slurmbridge"),
    (["version"], 0, "kubectl-slurmbridge "),
    (["status", "--kubeconfig", "kubeconfig"], 2, "cannot reach the API server"),
    (["why", "p", "--kubeconfig", "kubeconfig"], 2, "cannot reach the API server"),
    (["nodes", "--kubeconfig", "kubeconfig"], 2, "cannot reach the API server"),
    (["gpus", "--kubeconfig", "kubeconfig"], 2, "cannot reach the API server"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_the_plugin_runs_on_the_base_install_alone(
    args: list[str], code: int, says: str, tmp_path: Path
) -> None:
    unreachable_kubeconfig(tmp_path / "kubeconfig")
    done = _run([], PLUGIN, *args, cwd=tmp_path)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == code, done.stderr
    assert says in done.stdout + done.stderr
    imported = done.stderr.rpartition("IMPORTED ")[2]
    assert not any(f"'{m}'" in imported for m in ("fastapi", "uvicorn", "aiohttp", "pyreqwest"))


def test_slurmbridge_on_the_base_install_names_the_server_extra(tmp_path: Path) -> None:
    done = _run([], SLURMBRIDGE, "doctor", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert "pip install 'slurmbridge-k8s[server]'" in done.stderr


def test_the_server_extra_brings_what_the_servers_import(tmp_path: Path) -> None:
    imports = "import extender.server, admission.webhook, slurmbridge_cli.compose, uvloop"
    done = _run(["server"], imports + textwrap.dedent(SLURMBRIDGE), "--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Usage: slurmbridge"), done.stdout


def test_the_image_and_the_dev_kit_install_the_server_extra() -> None:
    dockerfile = (REPO / "deploy/images/bridge.Dockerfile").read_text()
    assert '["optional-dependencies"]["server"]' in dockerfile
    assert "'.[server,test]'" in (REPO / "deploy/dev/install.sh").read_text()
    assert tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"] == {
        "slurmbridge": "slurmbridge_cli.launch:main",
        "kubectl-slurmbridge": "slurmbridge_cli.kubectl:main",
    }
