"""A webhook outage on kind (issue 44, item 1): both webhook replicas stopped, the installed
chart's webhooks refuse the bridge's pods only, with the API server's message naming the webhook;
any other pod is created and starts (docs/operations.md, "webhook down")."""

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from bridge import keys
from tests.kind.cluster import Kind, wait, workload_pod

pytestmark = [pytest.mark.kind, pytest.mark.e2e]  # e2e: left out of the fast path


def refusal(kind: Kind, ns: str, pod: dict[str, Any]) -> str:
    """The API server's refusal of a server-side dry run of ``pod`` ("" once admitted)."""
    done = subprocess.run(
        ["kubectl", "--kubeconfig", str(kind.kubeconfig), "-n", ns, "create", "--dry-run=server",
         "-f", "-"], input=json.dumps(pod), capture_output=True, text=True, timeout=60,
        check=False)
    return done.stderr.strip() if done.returncode else ""


def bridge_pod(name: str) -> dict[str, Any]:
    return workload_pod(name, "sleep 600", grace=0).scheduler(keys.SCHEDULER_NAME).manifest()


@pytest.fixture
def webhook_down(kind: Kind, plain_ns: str) -> Iterator[None]:
    """Both webhook replicas stopped (the Deployment scaled to 0), then restored."""
    deploy = ("-n", kind.namespace, f"deployment/{kind.release}-webhook")
    replicas = kind.kubectl("get", *deploy, "-o", "jsonpath={.spec.replicas}")
    labels = kind.kubectl_json("get", *deploy)["spec"]["selector"]["matchLabels"]
    selector = ",".join(f"{k}={v}" for k, v in labels.items())
    kind.kubectl("scale", *deploy, "--replicas=0")
    try:
        kind.kubectl("-n", kind.namespace, "wait", "--for=delete", "pod", "-l", selector,
                     "--timeout=120s", timeout=150)
        wait(lambda: refusal(kind, plain_ns, bridge_pod("probe")), 60,
             "the API server to find no webhook replica")
        yield
    finally:
        kind.kubectl("scale", *deploy, f"--replicas={replicas}")
        kind.kubectl("rollout", "status", *deploy, "--timeout=180s", timeout=200)
        wait(lambda: not refusal(kind, plain_ns, bridge_pod("probe")), 60,
             "the API server to reach a webhook replica again")


def test_with_both_webhook_replicas_down_only_the_bridges_pods_are_refused(
    kind: Kind, ns: str, plain_ns: str, webhook_down: None
) -> None:
    ordinary = workload_pod("ordinary", "sleep 600", grace=0).manifest()
    kind.kubectl("-n", plain_ns, "create", "-f", "-", stdin=json.dumps(ordinary))
    assert kind.wait_running(plain_ns, "ordinary")["spec"]["schedulerName"] == "default-scheduler"

    create = ("create", "-f", "-")
    message = kind.refused("-n", plain_ns, *create, stdin=json.dumps(bridge_pod("bridge")))
    assert 'failed calling webhook "mutate.slurmbridge.io"' in message, message
    # In an enrolled namespace every pod is the bridge's: refused too, by that entry.
    message = kind.refused("-n", ns, *create, stdin=json.dumps(ordinary))
    assert 'failed calling webhook "labelled.mutate.slurmbridge.io"' in message, message
    assert not kind.kubectl("-n", ns, "get", "pods", "-o", "name").strip()
