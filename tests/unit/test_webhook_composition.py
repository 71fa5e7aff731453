"""``slurmbridge webhook`` reads the apiserver its settings name (``kube.kubeconfig``), through
one client made at start, not whatever ``$KUBECONFIG`` happens to say: every lookup a review
makes (the namespace's labels, the pod's Job) reaches the settings' apiserver."""

import json
import os
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme
import yaml

from bridge import keys
from slurmbridge_devkit.builders import PodBuilder
from slurmbridge_devkit.processes import free_port, stop_process
from tests.unit.test_admission import apply, make_review

NOWHERE = "127.0.0.1:9"  # the discard port: nothing listens on it
TOKEN = "settings-token"
NS = "team-a"
JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"
# The apiserver of the settings: the namespace (enrolled by label) and a gang Job in it.
OBJECTS = {
    f"/api/v1/namespaces/{NS}": {"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": NS, "labels": {keys.NAMESPACE_ENROLLED: "true"}}},
    f"/apis/batch/v1/namespaces/{NS}/jobs/train": {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {
            "name": "train", "namespace": NS, "uid": "job-uid",
            "annotations": {keys.GANG: "true"}}, "spec": {"parallelism": 2, "completions": 2}},
}


class StandIn(BaseHTTPRequestHandler):
    seen: list[tuple[str, str]]  # (path, Authorization) of each request

    def do_GET(self) -> None:
        self.seen.append((self.path, self.headers.get("Authorization", "")))
        found = OBJECTS.get(self.path)
        body = json.dumps(found or {"kind": "Status", "apiVersion": "v1", "code": 404,
                                    "status": "Failure", "reason": "NotFound"}).encode()
        self.send_response(200 if found else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the test reads ``seen``."""


def _kubeconfig(path: Path, server: str) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "x",
        "clusters": [{"name": "x", "cluster": {"server": server}}],
        "users": [{"name": "x", "user": {"token": TOKEN}}],
        "contexts": [{"name": "x", "context": {"cluster": "x", "user": "x"}}],
    }))
    return path


@pytest.fixture
def apiserver() -> Iterator[tuple[list[tuple[str, str]], str]]:
    seen: list[tuple[str, str]] = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("Handler", (StandIn,), {"seen": seen}))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield seen, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _serving(url: str, ca: ssl.SSLContext, proc: subprocess.Popen[bytes], stderr: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, stderr.read_text()
        assert time.monotonic() < deadline, "the webhook never answered /healthz"
        try:
            if httpx.get(f"{url}/healthz", verify=ca, timeout=1).is_success:
                return
        except httpx.TransportError:
            time.sleep(0.2)


def test_the_webhook_reads_the_apiserver_of_its_settings_not_the_environments(
    apiserver: tuple[list[tuple[str, str]], str], tmp_path: Path, tenancy_file: Path
) -> None:
    seen, server = apiserver
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.private_key_pem.write_to_path(str(tmp_path / "tls.key"))
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "tls.crt"))
    trusted = ssl.create_default_context()
    ca.configure_trust(trusted)
    (tmp_path / "owner.key").write_text("k" * 32)
    port = free_port()
    settings = tmp_path / "settings.yaml"
    settings.write_text(yaml.safe_dump({
        "slurm": {"url": f"http://{NOWHERE}", "token": "t",
                  "owner_key_file": str(tmp_path / "owner.key")},
        "kube": {"kubeconfig": str(_kubeconfig(tmp_path / "settings-kubeconfig", server))},
        "admission": {"host": "127.0.0.1", "port": port, "tenancy_file": str(tenancy_file),
                      "tls_cert_file": str(tmp_path / "tls.crt"),
                      "tls_key_file": str(tmp_path / "tls.key")},
    }))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("SLURMBRIDGE_") and k != "KUBERNETES_SERVICE_HOST"}
    env["KUBECONFIG"] = str(_kubeconfig(tmp_path / "env-kubeconfig", f"http://{NOWHERE}"))
    stderr = tmp_path / "stderr"
    with stderr.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "slurmbridge_cli", "--config", str(settings), "webhook"],
            env=env, stdout=subprocess.DEVNULL, stderr=err)
    url = f"https://127.0.0.1:{port}"
    try:
        _serving(url, trusted, proc, stderr)
        pod = PodBuilder("train-0", NS).bare().uid("u-0").owned_by("Job", "train").manifest()
        reply = httpx.post(f"{url}/mutate", json=make_review(pod, username=JOB_CONTROLLER),
                           verify=trusted, timeout=30)
        response: dict[str, Any] = reply.json()["response"]
    finally:
        stop_process(proc, 10)
    assert response["allowed"] is True, response["status"]["message"]
    labels = apply(pod, response)["metadata"]["labels"]
    assert (labels[keys.GROUP], labels[keys.GROUP_SIZE]) == ("train", "2")
    assert "Traceback" not in stderr.read_text()
    assert seen == [(path, f"Bearer {TOKEN}") for path in OBJECTS]  # each read, once
