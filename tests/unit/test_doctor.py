"""`slurmbridge doctor` against a stopped slurmrestd: one clear line, non-zero exit."""

import time
from pathlib import Path

import jwt
import pytest
from click.testing import CliRunner

from slurmbridge_cli.cli import main
from slurmbridge_devkit.kubeconfigs import unreachable_kubeconfig


def test_stopped_slurmrestd_is_one_line_with_a_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kubeconfig = unreachable_kubeconfig(tmp_path / "kubeconfig")
    monkeypatch.setenv("SLURMBRIDGE_SLURM__URL", "http://127.0.0.1:9")
    monkeypatch.setenv("SLURMBRIDGE_SLURM__TOKEN", "t")
    monkeypatch.setenv("SLURMBRIDGE_KUBE__KUBECONFIG", str(kubeconfig))
    result = CliRunner().invoke(main, ["doctor"])
    assert result.exit_code != 0
    slurm_lines = [line for line in result.output.splitlines() if "slurmrestd" in line]
    assert len(slurm_lines) == 1
    assert slurm_lines[0].startswith("FAIL")
    assert "127.0.0.1:9 unreachable" in slurm_lines[0]
    assert "hint: is slurmrestd running" in slurm_lines[0]



@pytest.mark.parametrize(("days", "label"), [(3, "WARN"), (30, "PASS"), (-1, "FAIL")])
def test_the_slurm_tokens_expiry_is_a_line_warning_within_seven_days(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, days: int, label: str
) -> None:
    token = tmp_path / "token"
    token.write_text(jwt.encode({"sun": "slurm", "exp": int(time.time()) + days * 86400 + 60},
                                b"k" * 32, algorithm="HS256"))
    monkeypatch.setenv("SLURMBRIDGE_SLURM__URL", "http://127.0.0.1:9")
    monkeypatch.setenv("SLURMBRIDGE_SLURM__TOKEN_FILE", str(token))
    kubeconfig = unreachable_kubeconfig(tmp_path / "kubeconfig")
    monkeypatch.setenv("SLURMBRIDGE_KUBE__KUBECONFIG", str(kubeconfig))
    result = CliRunner().invoke(main, ["doctor"])
    lines = [line for line in result.output.splitlines() if "token" in line and "expire" in line]
    assert len(lines) == 1, result.output
    assert lines[0].startswith(label), lines[0]
    assert str(token) in lines[0]
    if label != "PASS":
        assert "scontrol token" in lines[0]  # the hint: how to mint the next one
