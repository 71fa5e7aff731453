"""A mixed group on real kubelets (issue 43): a JobSet of a 1-CPU launcher and two workers whose
GPUs come through DRA is one Slurm heterogeneous job, and each worker's container is handed
exactly the devices of its component on its node (the DRA driver of deploy/kind/dra), beside
native jobs holding GPUs 0-1 of every node.

Slurm never puts two components of one heterogeneous job on one node (26.05: ``-N1 : -N2`` on
kind's two slurmd nodes pends for Resources while both are idle, ``-N1 : -N1`` runs at
once), so the launcher asks for partition ``external`` (a per-component partition, the
``slurmbridge.io/partition`` of its own template): kind's worker without slurmd, registered
as an EXTERNAL Slurm node (tests/kind/test_external.py), while the workers take the two
slurmd workers beside the native jobs.

No JobSet controller runs in kind (its image cannot be pulled here): the test installs a CRD
accepting the JobSet, creates it, and creates its child Jobs as the controller would, with
exactly its labels and annotations (tests/e2e/test_workloads.py); kind's own Job controller
makes the pods and the kubelets run them."""

import json
from dataclasses import dataclass
from typing import Any

import pytest

from bridge import keys
from slurmbridge_devkit.scontrol import JobView, gpu_overlaps, parse_job_line, show_jobs
from tests.e2e.test_workloads import (
    JOBSET_CRD,
    Replicated,
    crd_manifest,
    jobset_jobs,
    jobset_manifest,
)
from tests.kind.cluster import Kind, wait, workload_pod
from tests.kind.test_dra_claims import allocated, claim_spec
from tests.kind.test_external import external_node, sinfo  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.kind, pytest.mark.e2e]

END = "--"  # printed after the container's devices: an empty list is then a finding
PRINT_DEVICES = f"env | grep ^GPU_DEVICE_ | sort; echo {END}; sleep 600"


@dataclass(frozen=True)
class Admin:
    """Slurm's admin tools in the kind Slurm container (slurmbridge_devkit.scontrol.Admin)."""

    kind: Kind

    def admin(self, *args: str, check: bool = True) -> str:
        return self.kind.slurm(*args, check=check)


def create_jobset(kind: Kind, ns: str, name: str, replicated: Replicated) -> None:
    group, version, kind_name, _ = JOBSET_CRD
    kind.kubectl("apply", "-f", "-", stdin=json.dumps(crd_manifest(*JOBSET_CRD)))
    kind.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                 f"crd/{JOBSET_CRD[3]}.{group}")
    made = json.loads(kind.kubectl("-n", ns, "create", "-o", "json", "-f", "-",
                                   stdin=json.dumps(jobset_manifest(name, replicated))))
    owner = {"apiVersion": f"{group}/{version}", "kind": kind_name, "name": name,
             "uid": made["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
    for job in jobset_jobs(name, owner, replicated):
        kind.apply(ns, job)


def template(pod: dict[str, Any]) -> dict[str, Any]:
    """A pod manifest as a Job's pod template: its annotations and spec."""
    return {"metadata": {"annotations": pod["metadata"].get("annotations", {})},
            "spec": pod["spec"]}


def devices_seen(kind: Kind, ns: str, pod: str) -> list[str]:
    """The DRA devices the container was handed, as it printed them."""
    def printed() -> list[str] | None:
        lines = kind.kubectl("-n", ns, "logs", pod, check=False).split()
        return lines[:lines.index(END) + 1] if END in lines else None
    lines = wait(printed, 60, f"{pod}'s GPU_DEVICE_ lines")[:-1]
    return [line.split("=", 1)[1] for line in lines]


def running_pods(kind: Kind, ns: str, selector: str, count: int) -> list[dict[str, Any]]:
    def running() -> list[dict[str, Any]] | None:
        pods = kind.kubectl_json("-n", ns, "get", "pods", "-l", selector)["items"]
        live = [p for p in pods if p["status"].get("phase") == "Running"]
        return live if len(live) == count else None
    try:
        return wait(running, 240, f"{count} pods of {selector} Running")
    except AssertionError:
        print(kind.kubectl("-n", ns, "describe", "pods", "-l", selector, check=False))
        raise


def components(kind: Kind, job_id: str) -> dict[int, JobView]:
    """Offset -> the component as ``scontrol show job -d`` shows it."""
    shown = kind.slurm("scontrol", "show", "job", "-d", "-o", job_id).splitlines()
    parts = {int(v.fields["HetJobOffset"]): v for v in map(parse_job_line, shown)}
    assert sorted(parts) == [0, 1], shown
    return parts


@pytest.mark.usefixtures("external_node")
def test_a_jobsets_gpu_workers_see_exactly_their_components_devices(
    kind: Kind, ns: str, native: list[str]
) -> None:
    outside = kind.external_workers()[0]
    wait(lambda: "external" in sinfo(kind, outside).get("partitions", "").split(","), 60,
         f"{outside} in Slurm's partition external")
    for node in kind.workers():
        native.append(kind.sbatch("-J", "native-gpu", "-w", node, "--gres=gpu:2", "-c", "1",
                                  "--wrap", "sleep 600"))
    wait(lambda: all(kind.job_state(j) == "RUNNING" for j in native), 60, "natives RUNNING")
    natives = {(node, i) for j in native for node, ids in kind.job_gpus(j).items() for i in ids}
    assert {i for _, i in natives} == {0, 1}, natives
    kind.apply(ns, {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                    "metadata": {"name": "two-gpus"}, "spec": {"spec": claim_spec(2)}})
    launcher = (workload_pod("launcher", PRINT_DEVICES).cpu("1")
                .annotate(keys.PARTITION, "external").manifest())
    workers = (workload_pod("worker", PRINT_DEVICES)
               .claim("gpus", resourceClaimTemplateName="two-gpus").manifest())
    create_jobset(kind, ns, "mix", [("launcher", 1, 1, template(launcher)),
                                    ("workers", 1, 2, template(workers))])

    pods = running_pods(kind, ns, f"{keys.JOBSET_NAME}=mix", 3)
    jobs = {kind.job_of(p) for p in pods}
    assert len(jobs) == 1, f"one Slurm job for the JobSet's pods: {jobs}"
    job_id = jobs.pop()
    name = f"k8s:{ns}/mix"
    assert sorted(kind.slurm("squeue", "-h", "-o", "%i|%j", "-n", name).split()) == [
        f"{job_id}+0|{name}", f"{job_id}+1|{name}"]
    parts = components(kind, job_id)
    claims = kind.kubectl_json("-n", ns, "get", "resourceclaims")["items"]
    held: dict[str, list[tuple[str, str]]] = {
        r["uid"]: allocated(c) for c in claims for r in c["status"].get("reservedFor", [])}
    workers_seen: set[tuple[str, str]] = set()
    for pod in pods:
        meta, node = pod["metadata"], pod["spec"]["nodeName"]
        offset = 0 if meta["labels"][keys.JOBSET_REPLICATED_JOB] == "launcher" else 1
        assert node in parts[offset].nodes, (meta["name"], node, parts[offset].nodes)
        seen = devices_seen(kind, ns, meta["name"])
        if offset == 0:
            assert node == outside, (meta["name"], node)
            assert seen == [], f"the launcher's container was handed {seen}"
            assert meta["uid"] not in held, f"the launcher holds devices {held[meta['uid']]}"
            continue
        slurm_ids = parts[1].gpus[node]
        assert len(seen) == 2, (meta["name"], seen)
        assert {int(d.removeprefix("gpu-")) for d in seen} <= set(slurm_ids), (
            meta["name"], node, seen, slurm_ids)
        assert sorted(held[meta["uid"]]) == [(node, d) for d in sorted(seen)], held
        assert meta["annotations"][keys.GPU_IDS].split(",") == [
            d.removeprefix("gpu-") for d in seen], meta["annotations"]
        workers_seen |= {(node, d) for d in seen}
        print(json.dumps({"pod": meta["name"], "node": node, "container": seen,
                          "slurm": list(slurm_ids), "job": f"{job_id}+1"}))
    assert len(workers_seen) == 4, workers_seen
    assert not {(n, int(d.removeprefix("gpu-"))) for n, d in workers_seen} & natives
    assert gpu_overlaps(show_jobs(Admin(kind))) == {}
