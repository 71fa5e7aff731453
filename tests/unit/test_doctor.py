"""`slurmbridge doctor` against a stopped slurmrestd: one clear line, non-zero exit."""

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from slurmbridge_cli.cli import main


def test_stopped_slurmrestd_is_one_line_with_a_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "x",
        "clusters": [{"name": "x", "cluster": {"server": "https://127.0.0.1:9",
                                                "insecure-skip-tls-verify": True}}],
        "users": [{"name": "x", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "x", "user": "x"}}],
    }))
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
