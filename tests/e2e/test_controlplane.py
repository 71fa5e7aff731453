"""Smoke tests of the local control plane: the real pieces the bridge relies on work.

Each test proves one thing later tests take for granted: the API server serves
and authorizes, the real kube-scheduler binds pods to our API-only nodes,
extra schedulers run side by side, and the real API server calls an HTTPS
mutating webhook and stores its patch.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme
import yaml
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.admissionregistration_v1 import (
    MutatingWebhook,
    RuleWithOperations,
    WebhookClientConfig,
)
from lightkube.models.meta_v1 import LabelSelector, ObjectMeta
from lightkube.resources.admissionregistration_v1 import MutatingWebhookConfiguration
from lightkube.resources.core_v1 import Pod

from slurmbridge_devkit.builders import PodBuilder
from slurmbridge_devkit.kube import (
    ControlPlane,
    SchedulerFactory,
    run_controlplane,
    run_dir,
    scheduler_config,
    stop_scheduler,
)
from slurmbridge_devkit.kubelet import NodeFactory, set_pod_phase
from slurmbridge_devkit.namespaces import unique_name
from slurmbridge_devkit.waiting import wait_for

pytestmark = pytest.mark.e2e

NODE_LABEL = "slurmbridge.test/node"
MUTATED_LABEL = "slurmbridge.test/mutated"


def make_pod(name: str, namespace: str, *, node_label: str, scheduler: str | None = None) -> Pod:
    """A one-container pod pinned (by label) to this test's node, so nodes of
    concurrently running tests never receive it."""
    return (PodBuilder(name, namespace).bare().command("true", image="busybox:stable")
            .spec(nodeSelector={NODE_LABEL: node_label}).scheduler(scheduler).build())


async def bound_node(kube: AsyncClient, name: str, namespace: str) -> str | None:
    """The node a pod is bound to, or None while it is unscheduled."""
    pod = await kube.get(Pod, name, namespace=namespace)
    return pod.spec.nodeName if pod.spec is not None else None


async def test_apiserver_is_healthy_and_authorizes(control_plane: ControlPlane) -> None:
    trust = ssl.create_default_context(cafile=str(control_plane.ca_file))
    async with httpx.AsyncClient(verify=trust) as http:
        ready = await http.get(f"{control_plane.server}/readyz")
    assert ready.status_code == 200, ready.text
    version = control_plane.kubectl("version", "-o", "json")
    assert json.loads(version.stdout)["serverVersion"]["gitVersion"].startswith("v1.")
    can_i = control_plane.kubectl("auth", "can-i", "--list")
    assert "*.*" in can_i.stdout  # the admin kubeconfig is system:masters


async def test_default_scheduler_binds_pod_to_ready_node(
    kube: AsyncClient, namespace: str, make_node: NodeFactory
) -> None:
    node = unique_name("node")
    created = await make_node(node, cpu="8", memory="32Gi", gpus=2, labels={NODE_LABEL: node})
    assert created.spec is not None and not created.spec.taints  # not-ready taint lifted
    await kube.create(make_pod("plain", namespace, node_label=node))

    assert await wait_for(lambda: bound_node(kube, "plain", namespace), 30, what="binding") == node

    pod = await kube.get(Pod, "plain", namespace=namespace)
    running = await set_pod_phase(kube, pod, "Running")
    assert running.status is not None and running.status.phase == "Running"
    done = await set_pod_phase(kube, running, "Failed", exit_code=3)
    assert done.status is not None and done.status.containerStatuses is not None
    terminated = done.status.containerStatuses[0].state
    assert terminated is not None and terminated.terminated is not None
    assert terminated.terminated.exitCode == 3


async def test_extra_schedulers_run_side_by_side(
    kube: AsyncClient, namespace: str, make_node: NodeFactory, extra_scheduler: SchedulerFactory
) -> None:
    node = unique_name("node")
    await make_node(node, labels={NODE_LABEL: node})
    names = [unique_name("sched-a"), unique_name("sched-b")]
    started = [await extra_scheduler(n, scheduler_config(n)) for n in names]
    assert len({s.port for s in started}) == 2

    for i, scheduler in enumerate(names):
        await kube.create(make_pod(f"p{i}", namespace, node_label=node, scheduler=scheduler))
    for i in range(len(names)):
        pod_bound = partial(bound_node, kube, f"p{i}", namespace)
        assert await wait_for(pod_bound, 30, what=f"binding of p{i}") == node


# --- mutating webhook served from this process -----------------------------------


@dataclass
class WebhookCalls:
    """What the test webhook saw: one entry per AdmissionReview request."""

    uids: list[str] = field(default_factory=list)
    dry_runs: int = 0


def admission_response(review: dict[str, Any]) -> dict[str, Any]:
    """Allow, with a JSON patch adding MUTATED_LABEL (metadata.labels may be absent)."""
    request = review["request"]
    labels = request["object"]["metadata"].get("labels")
    patch = (
        [
            {
                "op": "add",
                "path": f"/metadata/labels/{MUTATED_LABEL.replace('/', '~1')}",
                "value": "true",
            }
        ]
        if labels
        else [{"op": "add", "path": "/metadata/labels", "value": {MUTATED_LABEL: "true"}}]
    )
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {
            "uid": request["uid"],
            "allowed": True,
            "patchType": "JSONPatch",
            "patch": base64.b64encode(json.dumps(patch).encode()).decode(),
        },
    }


def handler_for(calls: WebhookCalls) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            calls.uids.append(review["request"]["uid"])
            calls.dry_runs += bool(review["request"].get("dryRun"))
            body = json.dumps(admission_response(review)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep pytest output clean

    return Handler


@dataclass(frozen=True)
class HttpsWebhook:
    url: str
    ca_pem: bytes
    calls: WebhookCalls


@pytest.fixture
def https_webhook() -> Iterator[HttpsWebhook]:
    """An HTTPS admission webhook on 127.0.0.1 (random port), cert from a trustme CA."""
    ca = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    calls = WebhookCalls()
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(calls))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield HttpsWebhook(f"https://127.0.0.1:{server.server_port}/mutate", ca.cert_pem.bytes(), calls)
    server.shutdown()
    server.server_close()


@pytest.fixture
async def webhook_config(kube: AsyncClient, namespace: str, https_webhook: HttpsWebhook) -> Any:
    """Register https_webhook for pod CREATE in this test's namespace only.

    failurePolicy Ignore and the namespace selector keep it from touching any
    other test; the configuration is deleted afterwards.
    """
    name = f"slurmbridge-test-{uuid.uuid4().hex[:8]}"
    config = MutatingWebhookConfiguration(
        metadata=ObjectMeta(name=name),
        webhooks=[
            MutatingWebhook(
                name="label.test.slurmbridge.io",
                clientConfig=WebhookClientConfig(
                    url=https_webhook.url,
                    caBundle=base64.b64encode(https_webhook.ca_pem).decode(),
                ),
                rules=[
                    RuleWithOperations(
                        apiGroups=[""],
                        apiVersions=["v1"],
                        operations=["CREATE"],
                        resources=["pods"],
                        scope="Namespaced",
                    )
                ],
                namespaceSelector=LabelSelector(
                    matchLabels={"kubernetes.io/metadata.name": namespace}
                ),
                failurePolicy="Ignore",
                sideEffects="None",
                admissionReviewVersions=["v1"],
                timeoutSeconds=5,
            )
        ],
    )
    await kube.create(config)
    yield name
    try:
        await kube.delete(MutatingWebhookConfiguration, name)
    except ApiError as err:
        if err.status.code != 404:
            raise


async def test_apiserver_calls_https_mutating_webhook(
    kube: AsyncClient, namespace: str, https_webhook: HttpsWebhook, webhook_config: str
) -> None:
    pod = make_pod("probe", namespace, node_label="none")

    async def mutated_on_dry_run() -> bool:
        """Webhook configs reach the API server's informer asynchronously: probe
        with dry-run creates (sideEffects None makes that legal) until it applies."""
        created = await kube.create(pod, dry_run=True)
        return bool(created.metadata and (created.metadata.labels or {}).get(MUTATED_LABEL))

    await wait_for(mutated_on_dry_run, 30, what="webhook registration")
    assert https_webhook.calls.dry_runs >= 1

    calls_before = len(https_webhook.calls.uids)
    await kube.create(make_pod("real", namespace, node_label="none"))
    stored = await kube.get(Pod, "real", namespace=namespace)
    assert stored.metadata is not None and stored.metadata.labels is not None
    assert stored.metadata.labels[MUTATED_LABEL] == "true"
    assert len(https_webhook.calls.uids) == calls_before + 1


def test_up_stops_what_a_killed_run_left_and_keeps_what_a_live_one_runs(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    """A test run killed mid-way leaves its bridge processes (sessions of their own) and its
    extra kube-schedulers: the next `up` stops them, so they never cancel the next run's jobs
    as orphans; those of a run still going are left alone."""
    dead = subprocess.Popen(["true"])
    dead.wait()  # a holder pid that no longer runs
    logs = run_dir() / "logs"

    def left_behind(holder: int) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)",
                                 "slurmbridge_cli"], start_new_session=True)
        (logs / f"bridge-left-{proc.pid}.log.pid").write_text(f"{proc.pid} {holder}\n")
        return proc

    orphan, kept = left_behind(dead.pid), left_behind(os.getpid())
    name = unique_name("left", max_len=30)
    config = tmp_path / "scheduler.yaml"
    config.write_text(yaml.safe_dump(scheduler_config(name)))
    run_controlplane("scheduler", name, str(config))
    (run_dir() / f"scheduler-{name}.holder").write_text(f"{dead.pid}\n")
    try:
        run_controlplane("up")
        assert orphan.wait(timeout=30) is not None
        assert kept.poll() is None, "the bridge process of a live run was stopped"
        assert not (run_dir() / f"scheduler-{name}.pid").exists(), "the scheduler was kept"
    finally:
        for proc in (orphan, kept):
            proc.kill()
            proc.wait()
        (logs / f"bridge-left-{kept.pid}.log.pid").unlink(missing_ok=True)
        stop_scheduler(name)
