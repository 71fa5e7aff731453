"""The extender stops on the first SIGTERM or SIGINT whatever it is doing, also while it still
starts (apiserver and slurmrestd unreachable): a pod deletion must not wait out its grace."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import trustme
import yaml

from slurmbridge_devkit.processes import free_port

NOWHERE = "127.0.0.1:9"  # the discard port: nothing listens on it


def _settings(work: Path, health_port: int) -> Path:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.private_key_pem.write_to_path(str(work / "tls.key"))
    cert.cert_chain_pems[0].write_to_path(str(work / "tls.crt"))
    ca.cert_pem.write_to_path(str(work / "ca.crt"))
    (work / "kubeconfig").write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "x",
        "clusters": [{"name": "x", "cluster": {"server": f"https://{NOWHERE}"}}],
        "users": [{"name": "x", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "x", "user": "x"}}],
    }))
    (work / "owner.key").write_text("k" * 32)
    settings = work / "settings.yaml"
    settings.write_text(yaml.safe_dump({
        "slurm": {"url": f"http://{NOWHERE}", "token": "t",
                  "owner_key_file": str(work / "owner.key")},
        "kube": {"kubeconfig": str(work / "kubeconfig")},
        "extender": {
            "host": "127.0.0.1", "port": free_port(), "health_port": health_port,
            "tls_cert_file": str(work / "tls.crt"), "tls_key_file": str(work / "tls.key"),
            "client_ca_file": str(work / "ca.crt"),
            "drain_seconds": 30,  # a drain is for connections served: none yet
        },
    }))
    return settings


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_a_starting_extender_stops_on_the_first_signal(sig: signal.Signals,
                                                       tmp_path: Path) -> None:
    health = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURMBRIDGE_")}
    with (tmp_path / "stderr").open("w+") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "slurmbridge_cli", "--config",
             str(_settings(tmp_path, health)), "extender"],
            env=env, stdout=subprocess.DEVNULL, stderr=err,
        )
        try:
            deadline = time.monotonic() + 60
            while True:  # the health port is up: the extender is starting, waiting for Nodes
                assert proc.poll() is None, (tmp_path / "stderr").read_text()
                assert time.monotonic() < deadline, "the health port never answered"
                try:
                    if httpx.get(f"http://127.0.0.1:{health}/healthz", timeout=1).is_success:
                        break
                except httpx.TransportError:
                    time.sleep(0.2)
            time.sleep(2)  # a few retries against the apiserver and slurmrestd
            proc.send_signal(sig)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                pytest.fail(f"still running 5 s after {sig.name} while starting")
        finally:
            proc.kill()
            proc.wait()
        err.seek(0)
        assert "Traceback" not in err.read()
