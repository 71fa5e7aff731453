"""Every bad input to ``slurmbridge`` and ``kubectl slurmbridge`` is one line naming the fix and
a non-zero exit, never a traceback: run as a user runs them, in a process of their own."""

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import click
import pytest
import yaml
from click.testing import CliRunner

from slurmbridge_cli.cli import main as slurmbridge
from slurmbridge_cli.kubectl import main as plugin
from slurmbridge_devkit.kubeconfigs import unreachable_kubeconfig

SLURMBRIDGE = [sys.executable, "-m", "slurmbridge_cli"]
KUBECTL_PLUGIN = [sys.executable, "-m", "slurmbridge_cli.kubectl"]
UNREACHABLE = "http://127.0.0.1:9"  # the discard port: nothing listens on it



def _settings(path: Path, **sections: object) -> Path:
    path.write_text(yaml.safe_dump(sections))
    return path


@dataclass(frozen=True)
class Case:
    argv: Callable[[Path], list[str]]  # given the test's directory
    fix: tuple[str, ...]  # what the error line must name
    env: tuple[tuple[str, str], ...] = ()


def _with(settings: dict[str, object], *args: str) -> Callable[[Path], list[str]]:
    return lambda d: [*SLURMBRIDGE, "--config", str(_settings(d / "s.yaml", **settings)), *args]


SLURM = {"url": UNREACHABLE, "token": "t"}
CASES = {
    "log level": Case(lambda d: [*SLURMBRIDGE, "--log-level", "loud", "status"],
                      ("--log-level", "'loud'", "info")),
    "malformed YAML": Case(
        lambda d: [*SLURMBRIDGE, "--config", str(_write(d / "bad.yaml", "slurm:\n  url: [x\n")),
                   "doctor"],
        ("bad.yaml", "line 3", "column 1")),
    "settings not a mapping": Case(
        lambda d: [*SLURMBRIDGE, "--config", str(_write(d / "list.yaml", "- slurm\n")), "doctor"],
        ("list.yaml", "slurm:")),
    "URL without a scheme": Case(
        _with({"slurm": {"url": "slurm-ctl:6820", "token": "t"}}, "doctor"),
        ("slurm.url", "SLURMBRIDGE_SLURM__URL", "'slurm-ctl:6820'", "https://")),
    "no slurm.url": Case(_with({"slurm": {"token": "t"}}, "status"),
                         ("slurm.url", "required", "SLURMBRIDGE_SLURM__URL", "https://")),
    "no slurm section": Case(_with({}, "extender"), ("slurm.url", "required")),
    "bad value": Case(_with({"slurm": {**SLURM, "retries": "many"}}, "doctor"),
                      ("slurm.retries", "integer", "'many'")),
    "status without kubeconfig": Case(_with({"slurm": SLURM}, "status"),
                                      ("kubeconfig", "SLURMBRIDGE_KUBE__KUBECONFIG", "KUBECONFIG")),
    "doctor without kubeconfig": Case(_with({"slurm": SLURM}, "doctor"),
                                      ("kubeconfig", "SLURMBRIDGE_KUBE__KUBECONFIG", "KUBECONFIG")),
    "webhook without kubeconfig": Case(
        _with({"slurm": SLURM}, "webhook"),
        ("kubeconfig", "SLURMBRIDGE_KUBE__KUBECONFIG", "KUBECONFIG")),
    "extender without a token": Case(
        lambda d: _with({"slurm": {"url": UNREACHABLE},
                         "kube": {"kubeconfig": str(unreachable_kubeconfig(d / "kubeconfig"))}},
                        "extender")(d),
        ("SLURMBRIDGE_SLURM__TOKEN_FILE", "SLURMBRIDGE_SLURM__JWT_KEY_FILE")),
    "unreadable Slurm CA file": Case(
        _with({"slurm": {"url": "https://127.0.0.1:9", "token": "t",
                         "tls": {"ca_file": "/nonexistent/ca.pem"}}}, "extender"),
        ("slurm.tls.ca_file", "slurm.tls.caSecret", "/nonexistent/ca.pem")),
    "Slurm client certificate without its key": Case(
        _with({"slurm": {**SLURM, "tls": {"cert_file": "/x/tls.crt"}}}, "doctor"),
        ("slurm.tls", "key_file", "slurm.tls.clientSecret")),
    "extender without an owner key": Case(
        _with({"slurm": SLURM}, "extender"),
        ("no owner key", "SLURMBRIDGE_SLURM__OWNER_KEY_FILE", "Helm chart")),
    "environment not JSON": Case(
        _with({"slurm": SLURM}, "doctor"), ("admission", "JSON", "SLURMBRIDGE_ADMISSION__"),
        env=(("SLURMBRIDGE_ADMISSION__ENROLLED_NAMESPACES", "ml"),)),
    "unknown command": Case(lambda d: [*SLURMBRIDGE, "statsu"], ("statsu",)),
    "plugin output format": Case(lambda d: [*KUBECTL_PLUGIN, "status", "-o", "xml"],
                                 ("--output", "'xml'", "json")),
    "plugin without kubeconfig": Case(lambda d: [*KUBECTL_PLUGIN, "status"],
                                      ("kubeconfig", "--kubeconfig", "KUBECONFIG")),
}


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _run(argv: list[str], home: Path, env: tuple[tuple[str, str], ...] = ()
         ) -> subprocess.CompletedProcess[str]:
    """As a user without a cluster runs it: no kubeconfig anywhere, no SLURMBRIDGE_* but
    ``env`` set."""
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith("SLURMBRIDGE_") and k != "KUBECONFIG"}
    return subprocess.run(argv, env={**clean, **dict(env), "HOME": str(home)}, cwd=home,
                          capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_a_bad_input_is_one_line_naming_the_fix(case: Case, tmp_path: Path) -> None:
    done = _run(case.argv(tmp_path), tmp_path, case.env)
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert done.stdout == ""
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("Error: ")]
    assert len(errors) == 1, done.stderr
    # Besides that line, only click's usage lines for a usage error.
    assert all(line.startswith(("Usage: ", "Try ")) for line in lines if line not in errors), (
        done.stderr)
    for words in case.fix:
        assert words in errors[0], f"{words!r} not in {errors[0]!r}"


@pytest.mark.parametrize(("command", "args"), [
    (slurmbridge, []), (slurmbridge, ["extender"]), (slurmbridge, ["webhook"]),
    (slurmbridge, ["status"]), (slurmbridge, ["doctor"]), (slurmbridge, ["config-reference"]),
    (plugin, []), (plugin, ["status"]), (plugin, ["why"]), (plugin, ["nodes"]),
    (plugin, ["version"]),
], ids=lambda v: " ".join(v) if isinstance(v, list) else v.name)
def test_every_command_has_short_help(command: click.Group, args: list[str]) -> None:
    done = CliRunner().invoke(command, [*args, "-h"])
    assert done.exit_code == 0, done.output
    assert done.output.startswith("Usage: "), done.output


@pytest.mark.parametrize(("command", "args", "says"), [
    (slurmbridge, ["--version"], "slurmbridge, version "),
    (plugin, ["--version"], "kubectl-slurmbridge, version "),
    (plugin, ["version"], "kubectl-slurmbridge "),
], ids=["slurmbridge --version", "plugin --version", "plugin version"])
def test_both_commands_say_their_version(command: click.Group, args: list[str],
                                         says: str) -> None:
    done = CliRunner().invoke(command, args)
    assert done.exit_code == 0, done.output
    assert done.output == f"{says}{version('slurmbridge-k8s')}\n"
