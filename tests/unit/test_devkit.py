"""The dev kit's own pieces: the pod and job builders, the independent Slurm text parser and
the schedulers' dump a failed test prints."""

import subprocess
import sys
import time
from pathlib import Path

import pytest

from bridge import keys
from bridge.jobs.owner import GroupOwner, PodOwner
from bridge.slurm.types import Allocation, JobState, SlurmJob
from slurmbridge_devkit.builders import JobBuilder, PodBuilder
from slurmbridge_devkit.kube import dump_schedulers
from slurmbridge_devkit.scontrol import (
    JobView,
    expand_hostlist,
    gpu_overlaps,
    index_list,
    parse_job_line,
    parse_squeue,
)

# `scontrol show job -d -o` of a 2-node group job (Slurm 26.05, fields cut for length).
GROUP_JOB = (
    "JobId=4 JobName=k8s:demo/allreduce UserId=slurm(64030) GroupId=slurm(64030) "
    "Priority=1 Account=(null) QOS=normal JobState=RUNNING Reason=None Dependency=(null) "
    "Comment=slurmbridge.io/pod-uid=group:demo/allreduce NodeList=node[1-2] "
    "BatchHost=node1 NumNodes=2 NumCPUs=8 NumTasks=2 TRES=cpu=8,mem=2G,node=2,gres/gpu=2 "
    "JOB_GRES=gpu:2 Nodes=node1 CPU_IDs=0-3 Mem=1024 GRES=gpu:1(IDX:6) "
    "Nodes=node2 CPU_IDs=0-3 Mem=1024 GRES=gpu:1(IDX:0) MinCPUsNode=4 Features=(null)"
)
PENDING_JOB = (
    "JobId=9 JobName=k8s:ns/waits JobState=PENDING Reason=Resources NodeList=(null) NumNodes=1"
)


def test_a_group_job_reads_as_its_nodes_and_gpu_indices_per_node() -> None:
    job = parse_job_line(GROUP_JOB)
    assert (job.job_id, job.name, job.state, job.reason) == (
        4, "k8s:demo/allreduce", "RUNNING", "None"
    )
    assert job.nodes == ("node1", "node2")
    assert job.gpus == {"node1": (6,), "node2": (0,)}
    assert job.fields["Comment"] == "slurmbridge.io/pod-uid=group:demo/allreduce"


def test_a_pending_job_has_no_nodes_and_no_gpus() -> None:
    job = parse_job_line(PENDING_JOB)
    assert (job.state, job.reason, job.nodes, job.gpus) == ("PENDING", "Resources", (), {})


@pytest.mark.parametrize(("gres", "indices"), [
    ("gpu:2(IDX:4-5)", (4, 5)),
    ("gpu:a100:4(IDX:0-1,3,6)", (0, 1, 3, 6)),
    ("gpu(IDX:N/A)", ()),
    ("", ()),
])
def test_gpu_indices_of_one_node(gres: str, indices: tuple[int, ...]) -> None:
    line = f"JobId=1 JobState=RUNNING NodeList=n1 Nodes=n1 CPU_IDs=0 Mem=1 GRES={gres}"
    assert parse_job_line(line).gpus == {"n1": indices}


def _running(job_id: int, gres: str) -> JobView:
    return parse_job_line(f"JobId={job_id} JobState=RUNNING NodeList=n1 JOB_GRES=x Nodes=n1 "
                          f"CPU_IDs=0 Mem=1 GRES={gres}")


def test_typed_gpus_and_shards_as_scontrol_shows_them() -> None:
    """Slurm 24.11's ``scontrol show job -d`` for a typed GPU and for shards of GPU 3."""
    assert _running(1, "gpu:1g.10gb:2(IDX:2-3)").gpus == {"n1": (2, 3)}
    shards = _running(2, "shard:2(0/4,0/4,0/4,2/4,0/4,0/4,0/4,0/4)")
    assert (shards.gpus, shards.shards) == ({"n1": ()}, {"n1": {3: (2, 4)}})


def test_the_gpu_overlap_check_covers_shards_and_typed_slices() -> None:
    two_shards, one_shard = _running(1, "shard:2(0/4,2/4)"), _running(2, "shard:1(0/4,1/4)")
    three_shards = _running(3, "shard:3(0/4,3/4)")
    slice_1 = _running(4, "gpu:1g.10gb:1(IDX:1)")
    slice_1_again = _running(5, "gpu:1g.10gb:1(IDX:1)")
    assert gpu_overlaps([two_shards, one_shard, _running(6, "gpu:1g.10gb:1(IDX:0)")]) == {}
    assert gpu_overlaps([two_shards, three_shards]) == {
        ("n1", 1): ["1 (2/4 shards)", "3 (3/4 shards)"]}
    assert gpu_overlaps([two_shards, slice_1]) == {("n1", 1): ["4", "1 (2/4 shards)"]}
    assert gpu_overlaps([slice_1, slice_1_again]) == {("n1", 1): ["4", "5"]}


@pytest.mark.parametrize(("expr", "names"), [
    ("node1", ("node1",)),
    ("node[1-3]", ("node1", "node2", "node3")),
    ("gpu[01-02,07],cpu9", ("gpu01", "gpu02", "gpu07", "cpu9")),
    ("r[1-2]n[1-2]", ("r1n1", "r1n2", "r2n1", "r2n2")),
])
def test_hostlists_expand_as_slurm_prints_them(expr: str, names: tuple[str, ...]) -> None:
    assert expand_hostlist(expr) == names


def test_index_lists() -> None:
    assert index_list("0-2,5") == (0, 1, 2, 5)


def test_squeue_lines() -> None:
    text = "4|k8s:demo/g|RUNNING|None|node[1-2]\n9|x|PENDING|Priority|\n"
    (running, pending) = parse_squeue(text)
    assert (running.job_id, running.nodes) == (4, ("node1", "node2"))
    assert (pending.state, pending.reason, pending.nodes) == ("PENDING", "Priority", ())


def test_pod_builder_makes_a_gpu_group_member() -> None:
    pod = PodBuilder("p").gpus(2).group("g", 2).build()
    assert pod.metadata is not None and pod.spec is not None
    assert pod.metadata.name == "p"
    assert pod.metadata.labels == {keys.GROUP: "g", keys.GROUP_SIZE: "2"}
    assert pod.spec.schedulerName == keys.SCHEDULER_NAME
    resources = pod.spec.containers[0].resources
    assert resources is not None and resources.limits is not None
    assert resources.limits[keys.GPU_RESOURCE] == "2"
    assert resources.requests == resources.limits


def test_pod_builder_leaves_out_what_is_unset() -> None:
    manifest = PodBuilder("q", "ns").scheduler(None).cpu(None).memory(None).manifest()
    assert "schedulerName" not in manifest["spec"]
    assert "resources" not in manifest["spec"]["containers"][0]
    assert manifest["metadata"]["namespace"] == "ns"


def test_pod_builder_adds_what_the_api_server_and_the_kubelet_set() -> None:
    pod = (PodBuilder("w-0", "ns").uid("u1").node("kube-a").running().deleting()
           .owned_by("Job", "train").pod_group("ring").build())
    assert pod.metadata is not None and pod.spec is not None and pod.status is not None
    assert (pod.metadata.uid, pod.spec.nodeName, pod.status.phase) == ("u1", "kube-a", "Running")
    assert pod.metadata.deletionTimestamp is not None
    assert pod.metadata.ownerReferences is not None
    assert (pod.metadata.ownerReferences[0].kind, pod.metadata.ownerReferences[0].name) == (
        "Job", "train")
    statuses = pod.status.containerStatuses
    assert statuses is not None and statuses[0].ready
    assert statuses[0].state is not None and statuses[0].state.running is not None
    assert "status" not in PodBuilder("p").manifest()
    assert "terminationGracePeriodSeconds" not in PodBuilder("p").grace(None).manifest()["spec"]


def test_job_builder_defaults_to_pod_uid_1s_pending_job() -> None:
    assert JobBuilder().build() == SlurmJob(
        7, "k8s:ns/p", JobState.PENDING, "None", PodOwner("uid-1"), None)
    group = (JobBuilder(12, "k8s:ns/g").owner(GroupOwner("ns", "g"))
             .running("n1", gpus=(4, 5)).tenancy(user="alice", qos="low").build())
    assert group == SlurmJob(12, "k8s:ns/g", JobState.RUNNING, "None", GroupOwner("ns", "g"),
                             Allocation(("n1",), {"n1": (4, 5)}), user="alice", qos="low")


# A stand-in kube-scheduler: writes klog's SIGUSR2 dump to its log when signalled.
_STAND_IN = """
import signal, sys, time
log = open(sys.argv[1], "a", buffering=1)
log.write('I1206 "Unable to schedule pod; no fit; waiting" pod="ns/p" err="0/4 nodes are '
          'available: 1 Insufficient cpu"\\n')
def dump(*_):
    log.write('I1206 "Dump of cached NodeInfo" nodes=<\\n\\tNode name: kube-node1\\n >\\n')
signal.signal(signal.SIGUSR2, dump)
log.write("ready\\n")
while True:
    time.sleep(0.05)
"""


def _stand_in(log: Path) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-c", _STAND_IN, str(log)])
    deadline = time.monotonic() + 10
    while "ready" not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline, "stand-in scheduler did not start"
        time.sleep(0.05)
    (log.parent.parent / f"{log.stem}.pid").write_text(f"{proc.pid}\n")
    return proc


def test_a_failed_tests_report_carries_each_bridge_schedulers_cache_and_no_fit_reasons(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURMBRIDGE_CACHE", str(tmp_path))
    monkeypatch.delenv("SLURMBRIDGE_CP_INSTANCE", raising=False)
    logs = tmp_path / "k8s" / "run" / "logs"
    logs.mkdir(parents=True)
    bridge_log = logs / "scheduler-slurmbridge-2411-abc.log"
    default_log = logs / "scheduler-default.log"
    procs = [_stand_in(bridge_log), _stand_in(default_log)]
    try:
        report = dump_schedulers()
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    assert f"== {bridge_log}" in report
    assert "1 Insufficient cpu" in report
    assert "Dump of cached NodeInfo" in report and "kube-node1" in report
    # the default scheduler is not the bridge's: neither signalled nor reported
    assert "Dump" not in default_log.read_text() and str(default_log) not in report
