"""Slurm's nodes against a user or a node that tries (issue 41, cases 5, 6 and 7), on kind's
real kubelets: what tests/e2e/test_managed_nodes.py and test_nodesync.py prove against an API
server alone, here with the kubelets that would run what gets through.

- A pod the bridge does not place is refused on a managed worker (preset ``spec.nodeName``, or
  tolerating the managed taint) by the chart's ValidatingAdmissionPolicies, while the
  DaemonSets deploy/kind/up.sh lists in ``managedNodes`` keep running there.
- ``kubectl debug`` on a running GPU pod: a container naming its own GPUs is refused; one
  without is admitted, and its kubelet gives it the pod's Slurm GPUs.
- A worker's kubelet labels its own Node as the other worker's Slurm node: ignored and told;
  Slurm's pods for that node still run there.
"""

import json
from typing import Any

import pytest

from bridge import keys
from tests.kind.cluster import WORKLOAD_IMAGE, Kind, wait, workload_pod
from tests.kind.test_pods import PRINT_GPU_ENV, env_lines

pytestmark = [pytest.mark.kind, pytest.mark.e2e]  # e2e: left out of the fast path

EVERY_TAINT = {"operator": "Exists"}  # what many node agents tolerate
MANAGED = {"key": keys.MANAGED_TAINT, "operator": "Exists", "effect": "NoSchedule"}
# deploy/kind/up.sh's managedNodes.daemonSets
LISTED = ("kube-system/kube-proxy", "kube-system/kindnet", "slurmbridge-dra/dra-gpu-plugin")
KUBELET_SLURM_NODE, _ = keys.KUBELET_WRITABLE_NODE_LABELS  # a kubelet may set it on itself
KUBELET_CONF = "/etc/kubernetes/kubelet.conf"  # the worker's kubelet's own credentials


def foreign(name: str, **spec: Any) -> dict[str, Any]:
    """A pod the default scheduler (or nobody) places, taking every GPU of its node."""
    pod = workload_pod(name, "sleep 600", grace=0).spec(**spec).manifest()
    pod["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    return pod


def managed_nodes(kind: Kind) -> list[str]:
    nodes = kind.kubectl_json("get", "nodes", "-l", f"{keys.MANAGED_NODE_LABEL}=true")
    return sorted(n["metadata"]["name"] for n in nodes["items"])


def test_a_pod_slurm_did_not_place_is_refused_on_a_managed_worker_and_runs_elsewhere(
    kind: Kind, plain_ns: str
) -> None:
    """spec.nodeName skips every scheduler and the kubelet ignores NoSchedule; a toleration of
    the managed taint lets kube-scheduler put the pod there."""
    worker = kind.workers()[0]
    assert set(kind.workers()) <= set(managed_nodes(kind)), "up.sh labels every worker managed"
    create = ("-n", plain_ns, "create", "-f", "-")
    message = kind.refused(*create, stdin=json.dumps(foreign("squatter", nodeName=worker)))
    assert "-managed-node-names" in message, message  # the policy's name
    assert worker in message and keys.MANAGED_NODE_LABEL in message, message
    assert "managedNodes" in message, message
    for toleration in (MANAGED, EVERY_TAINT):
        pod = foreign("tolerant", tolerations=[toleration])
        message = kind.refused(*create, stdin=json.dumps(pod))
        assert "-managed-nodes" in message and keys.MANAGED_TAINT in message, message
    assert not kind.kubectl("-n", plain_ns, "get", "pods", "-o", "name").strip()

    # The same pod on a node Slurm does not manage (kind's control plane) is admitted and runs.
    plain = kind.kubectl("get", "nodes", "-l", "node-role.kubernetes.io/control-plane",
                         "-o", "jsonpath={.items[0].metadata.name}")
    kind.kubectl(*create, stdin=json.dumps(foreign("elsewhere", nodeName=plain)))
    assert kind.wait_running(plain_ns, "elsewhere")["spec"]["nodeName"] == plain


def daemon_pods(kind: Kind, listed: str, node: str) -> list[dict[str, Any]]:
    """The pods of DaemonSet ``listed`` (namespace/name) on ``node``."""
    ns, name = listed.split("/")
    pods = kind.kubectl_json("-n", ns, "get", "pods", f"--field-selector=spec.nodeName={node}")
    return [p for p in pods["items"] if any(
        r["kind"] == "DaemonSet" and r["name"] == name
        for r in p["metadata"].get("ownerReferences", []))]


def stray_daemon_set(name: str, node: str) -> dict[str, Any]:
    """A node agent up.sh does not list, tolerating every taint, kept to ``node``."""
    template = workload_pod(name, "sleep 600", grace=0).spec(
        restartPolicy="Always", tolerations=[EVERY_TAINT],
        affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}},
    ).manifest()
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": template["spec"]}}}


def test_only_the_daemonsets_up_sh_lists_run_on_the_managed_workers(
    kind: Kind, plain_ns: str
) -> None:
    """kube-controller-manager's DaemonSet controller creates both: the listed one's pod is
    admitted again once deleted, the stray one's never is."""
    worker = kind.workers()[0]
    for listed in LISTED:
        for node in kind.workers():
            pods = daemon_pods(kind, listed, node)
            assert [p["status"].get("phase") for p in pods] == ["Running"], (listed, node, pods)
    (old,) = daemon_pods(kind, LISTED[2], worker)
    kind.republish_dra_devices(worker)  # its pod deleted, created again, its devices back
    wait(lambda: [p for p in daemon_pods(kind, LISTED[2], worker)
                  if p["metadata"]["uid"] != old["metadata"]["uid"]
                  and p["status"].get("phase") == "Running"], 120,
         f"a new pod of {LISTED[2]} Running on {worker}")

    kind.apply(plain_ns, stray_daemon_set("stray", worker))
    message = wait(lambda: next(iter(kind.events("DaemonSet", "stray", "FailedCreate")
                                      .values()), ""), 60,
                   "the DaemonSet controller's refused pod of DaemonSet stray")
    assert keys.MANAGED_TAINT in message and "managedNodes" in message, message
    assert not kind.kubectl("-n", plain_ns, "get", "pods", "-o", "name").strip()


def test_kubectl_debug_on_a_running_gpu_pod_sees_its_slurm_gpus_and_never_its_own(
    kind: Kind, ns: str
) -> None:
    kind.apply(ns, workload_pod("trainer", PRINT_GPU_ENV, gpus=2).manifest())
    pod = kind.wait_running(ns, "trainer")
    node, annotations = pod["spec"]["nodeName"], pod["metadata"]["annotations"]
    slurm_gpus = kind.job_gpus(kind.job_of(pod))
    gpu_ids = annotations[keys.GPU_IDS]
    assert sorted(int(i) for i in gpu_ids.split(",")) == sorted(slurm_gpus[node]), slurm_gpus
    debug = ("-n", ns, "debug", "trainer", f"--image={WORKLOAD_IMAGE}",
             "--image-pull-policy=Never", "--profile=general")
    show = ("--", "sh", "-c", PRINT_GPU_ENV)

    message = kind.refused(*debug, "-c", "thief", "--env=NVIDIA_VISIBLE_DEVICES=all", *show)
    assert "thief" in message and "NVIDIA_VISIBLE_DEVICES" in message, message
    assert keys.GPU_IDS in message, message

    kind.kubectl(*debug, "-c", "looker", *show)
    added = kind.pod(ns, "trainer")
    assert added is not None
    assert [c["name"] for c in added["spec"]["ephemeralContainers"]] == ["looker"]
    env = env_lines(kind, ns, "trainer", "looker")  # as the worker's kubelet set it
    assert env["NVIDIA"] == gpu_ids != "all", env
    assert env["CUDA"] == annotations[keys.CUDA_DEVICES], (env, annotations)


def kubelet_label(kind: Kind, node: str, label: str) -> str:
    """``kubectl label`` on ``node``'s own Node with its kubelet's credentials, as a
    compromised node would; kubectl's error, or "" if NodeRestriction let it."""
    done = kind.node_exec(node, "sh", "-c", f"kubectl --kubeconfig {KUBELET_CONF} label node "
                          f"{node} {label} --overwrite 2>&1 || echo REFUSED", check=False)
    return done if "REFUSED" in done else ""


def test_a_worker_labelling_itself_the_other_slurm_node_gets_none_of_its_pods(
    kind: Kind, ns: str, native: list[str]
) -> None:
    """NodeRestriction lets a kubelet set slurmbridge.io/ labels on its own Node, not the
    node-restriction.kubernetes.io/ one an admin names a Slurm node with."""
    impostor, other = kind.workers()[:2]
    # The impostor's GPUs are all held: Slurm can place a GPU pod on `other` only.
    native.append(kind.sbatch("-J", "native-impostor", "-w", impostor, "--gres=gpu:4", "-c", "1",
                              "--wrap", "sleep 600"))
    wait(lambda: kind.job_state(native[0]) == "RUNNING", 60, f"native job {native[0]} RUNNING")
    told_before = kind.events("Node", impostor, keys.EventReason.NODE_LABEL_IGNORED)
    try:
        refused = kubelet_label(kind, impostor, f"{keys.NODE_SLURM_NODE}={other}")
        assert "forbidden" in refused.lower(), f"the kubelet set {keys.NODE_SLURM_NODE}"
        assert kubelet_label(kind, impostor, f"{KUBELET_SLURM_NODE}={other}") == ""

        def told() -> str:
            now = kind.events("Node", impostor, keys.EventReason.NODE_LABEL_IGNORED)
            return next((m for name, m in now.items() if name not in told_before), "")
        message = wait(told, 60, f"{impostor} told its {KUBELET_SLURM_NODE} label is ignored")
        assert f"{KUBELET_SLURM_NODE}={other}" in message, message

        kind.apply(ns, workload_pod("placed", "sleep 600", gpus=1).manifest())
        pod = kind.wait_running(ns, "placed")
        assert list(kind.job_gpus(kind.job_of(pod))) == [other]
        assert pod["spec"]["nodeName"] == other, f"Slurm placed it on {other}: {pod['spec']}"
        assert pod["metadata"]["annotations"][keys.SLURM_NODE] == other
    finally:
        kind.kubectl("label", "node", impostor, f"{KUBELET_SLURM_NODE}-",
                     f"{keys.NODE_SLURM_NODE}-")
