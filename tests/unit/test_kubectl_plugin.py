"""``kubectl slurmbridge``: status, why and nodes, read from what the bridge itself wrote.

The world is made by the bridge over the fakes (slurmbridge_devkit/fakes.py): filter submits
the pods' jobs, the notifier writes the condition and events, the binder the Binding's
annotations, NodeSync the node taints and conditions.  What the bridge does not write is
added as its writers would: kube-scheduler's FailedScheduling events around filter's answer
(its FitError words), the Scheduled event, and the Job controller's FailedCreate event for a
pod the webhook refused.  Every timestamp is then fixed, so the output is exact.
"""

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from click.testing import CliRunner, Result
from lightkube.models.core_v1 import NodeCondition, NodeSpec, NodeStatus, Taint
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Event, Node, Pod

from bridge import keys
from bridge.controllers.nodesync import NodeSync
from bridge.jobs.request import JobRequest
from bridge.kube.nodecache import NodeCache
from bridge.kube.writes import set_slurm_condition
from bridge.link.podcache import PodCache
from bridge.placement.reasons import clock
from bridge.slurm.errors import SlurmRejected
from slurmbridge_cli import kubectl
from slurmbridge_cli.kubectl import Session, Target
from slurmbridge_devkit.builders import PodBuilder
from slurmbridge_devkit.fake_kube import FakeKube, api_error
from slurmbridge_devkit.fakes import FakeSlurm, bridge_over_fakes, idle_node

NS = "ns"
T0 = datetime(2026, 11, 30, 13, 0, tzinfo=UTC)
NOW = T0 + timedelta(minutes=5, seconds=30)
# When each kind of event happened, in seconds after the pods were created.
EVENT_AT = {"SlurmSubmitRefused": 1, "FailedScheduling": 2, "FailedCreate": 3,
            "SlurmPending": 12, "Scheduled": 15}
# Slurm's backfill expects the job of pod "waits" to start 5 hours after the world is made
# (the bridge words it with the real clock: hours, so the words hold however long the suite
# runs first), by the backfill 20 s before.
MADE = datetime.now(UTC)
ESTIMATE, BACKFILL = MADE + timedelta(hours=5), MADE - timedelta(seconds=20)
EXPECTED = clock(ESTIMATE, MADE)
SAID_EXPECTED = (f"; expected to start at {EXPECTED}, in about 5 hours, by Slurm's backfill "
                 f"at {BACKFILL:%H:%M}")
ADMISSION_REFUSAL = (
    'Error creating: admission webhook "validate.slurmbridge.io" denied the request: '
    "slurmbridge.io/gpu-ids may only be written by slurmbridge itself "
    "(system:serviceaccount:slurmbridge-system:slurmbridge)"
)


class RefusingSlurm(FakeSlurm):
    """Slurm refusing a partition it does not have, as slurmrestd answers."""

    async def submit(self, req: JobRequest) -> int:
        if req.placement.partition == "nosuch":
            raise SlurmRejected("submit", ["Invalid partition name specified"], 500)
        return await super().submit(req)


def _pod(name: str, *, scheduler: str = keys.SCHEDULER_NAME, **annotations: str) -> Pod:
    """A pod as the webhook admitted it: tenancy filled in, GPUs moved to the annotation."""
    return PodBuilder(name, NS).uid(f"uid-{name}").scheduler(scheduler).annotations(annotations) \
        .build()


def _event(name: str, kind: str, reason: str, message: str, *, uid: str | None = None,
           source: str = keys.SCHEDULER_NAME, warning: bool = True) -> Event:
    return cast(Event, Event.from_dict({
        "metadata": {"name": f"{name}.{reason.lower()}", "namespace": NS},
        "involvedObject": {"kind": kind, "name": name, "namespace": NS, "uid": uid},
        "reason": reason, "message": message, "type": "Warning" if warning else "Normal",
        "reportingComponent": source, "count": 1,
    }))


def _fit_error(reason: str) -> str:
    """kube-scheduler's FailedScheduling message when the extender failed the one node."""
    return (f"0/1 nodes are available: 1 {reason}. preemption: 0/1 nodes are available: "
            "1 Preemption is not helpful for scheduling.")


def _node(name: str, *, slurm: str | None = None, cordoned: bool = False,
          taints: list[Taint] | None = None) -> Node:
    return Node(
        metadata=ObjectMeta(name=name, labels={keys.NODE_SLURM_NODE: slurm} if slurm else {}),
        spec=NodeSpec(unschedulable=cordoned or None, taints=taints),
        status=NodeStatus(conditions=[NodeCondition(type="Ready", status="True")]),
    )


def _freeze(kube: FakeKube) -> None:
    """Every timestamp at a fixed time: pods created at T0, events at EVENT_AT."""
    stamp = T0.strftime("%Y-%m-%dT%H:%M:%SZ")
    for (kind, _, _), obj in kube.objects.items():
        obj["metadata"]["creationTimestamp"] = stamp
        for condition in (obj.get("status") or {}).get("conditions") or []:
            condition["lastTransitionTime"] = (T0 + timedelta(seconds=12)).isoformat()
        if kind == "Event":
            at = (T0 + timedelta(seconds=EVENT_AT[obj["reason"]])).isoformat()
            obj.update(firstTimestamp=at, lastTimestamp=at)


async def _world(workdir: Path) -> FakeKube:
    kube, slurm = FakeKube(), RefusingSlurm(("node1", "node2", "node3"))
    slurm.nodes["node1"] = idle_node("node1", "MIXED")
    slurm.nodes["node3"] = idle_node("node3", "IDLE", "DRAIN", reason="PSU swap (ops)")
    # Slurm's reasons are read at the first poll (by default, half the refresh interval on).
    bridge = bridge_over_fakes(workdir, slurm, kube, placement={"reason_refresh_seconds": 0})
    tenancy = {keys.ACCOUNT: "research", keys.SLURM_USER: "alice", keys.QOS: "normal"}
    for pod in (
        _pod("waits", **tenancy, **{keys.GPUS: "2"}),
        _pod("train", **tenancy, **{keys.GPUS: "2"}),
        _pod("badpart", **tenancy, **{keys.PARTITION: "nosuch"}),
        _pod("web", scheduler="default-scheduler"),
    ):
        kube.add(pod)
    for name in ("waits", "train", "badpart"):  # the leader's intake, then kube-scheduler
        await bridge.intake.take(await kube.get(Pod, name, namespace=NS))
        verdict = await bridge.placer.filter(await kube.get(Pod, name, namespace=NS), ["node1"])
        await kube.create(_event(name, "Pod", "FailedScheduling", _fit_error(verdict.reason),
                                 uid=f"uid-{name}"))
    [train_job] = [j for j in slurm.jobs.values() if j.name == f"k8s:{NS}/train"]
    [waits_job] = [j for j in slurm.jobs.values() if j.name == f"k8s:{NS}/waits"]
    slurm.put(dataclasses.replace(waits_job, expected_start=ESTIMATE, backfill_at=BACKFILL))
    slurm.start(train_job.job_id, "node1", gpus=(4, 5))
    await bridge.poller.poll_once()
    await bridge.releaser.drain()  # the leader records the job on the pod
    verdict = await bridge.placer.filter(await kube.get(Pod, "train", namespace=NS), ["node1"])
    assert verdict.keep == ["node1"], verdict
    await bridge.binder.bind(NS, "train", "uid-train", "node1")
    await kube.create(_event("train", "Pod", "Scheduled",
                             f"Successfully assigned {NS}/train to node1",
                             uid="uid-train", warning=False))
    await kube.patch(Pod.Status, "train", {"status": {"phase": "Running"}}, namespace=NS)
    # A pod the webhook gated: its job pends, and only the bridge's event says why.
    kube.add(PodBuilder("held", NS).scheduler(keys.SCHEDULER_NAME).gated()
             .annotations(tenancy).build())
    await bridge.placer.prepare(await kube.get(Pod, "held", namespace=NS))
    await bridge.poller.poll_once()
    await asyncio.sleep(0.3)  # the notifier's quiet period (0.1 s over the fakes)
    await bridge.notifier.drain()
    # A Job whose pods the webhook refuses: the Job controller's event is all that is left.
    await kube.create(_event("trainer", "Job", "FailedCreate", ADMISSION_REFUSAL,
                             source="job-controller"))
    for node in (
        _node("node1"), _node("kube-node2", slurm="node2", cordoned=True),
        _node("kube-node3", slurm="node3"),
        _node("login", taints=[Taint(key="dedicated", value="login", effect="NoSchedule")]),
    ):
        kube.add(node)
    await NodeSync(kube, slurm, NodeCache(kube), PodCache(kube)).reconcile_once()
    _freeze(kube)
    return kube


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> FakeKube:
    return asyncio.run(_world(tmp_path_factory.mktemp("kubectl")))


Connect = Callable[[Target], AbstractAsyncContextManager[Session]]


def _connect(kube: FakeKube) -> Connect:
    @asynccontextmanager
    async def connect(target: Target) -> AsyncIterator[Session]:
        yield Session(kube, NS, "https://apiserver.test:6443", NOW)

    return connect


def run(kube: FakeKube, *args: str) -> Result:
    return CliRunner().invoke(kubectl.main, list(args), obj=_connect(kube))


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.splitlines()]


# --- status ----------------------------------------------------------------------------------


def test_status_is_the_pod_job_table_of_the_bridges_pods(world: FakeKube) -> None:
    result = run(world, "status")
    assert result.exit_code == 0, result.output
    assert _lines(result.output) == [
        "POD          JOB   STATE     REASON             EXPECTED" + " " * (len(EXPECTED) - 5)
        + "NODE    GPUS   AGE",
        "ns/badpart   -     refused   InvalidPartition   -" + " " * (len(EXPECTED) + 2)
        + "-       -      5m",
        "ns/held      102   pending   Priority           -" + " " * (len(EXPECTED) + 2)
        + "-       -      5m",
        "ns/train     101   running   -                  -" + " " * (len(EXPECTED) + 2)
        + "node1   4,5    5m",
        f"ns/waits     100   pending   Priority           {EXPECTED}   -       -      5m",
    ]


def test_status_as_json_and_yaml_carries_the_bridges_words(world: FakeKube) -> None:
    result = run(world, "status", "-o", "json")
    assert result.exit_code == 0, result.output
    rows = {r["pod"]: r for r in json.loads(result.output)}
    assert rows["train"] == {
        "namespace": NS, "pod": "train", "job_id": 101, "state": "running", "reason": "",
        "message": "Slurm job 101 allocated node1", "expected": "", "node": "node1",
        "slurm_node": "node1", "gpus": "4,5", "gpus_requested": 2, "age": "5m",
        "created": "2026-11-30T13:00:00Z",
    }
    assert rows["waits"]["message"] == (
        "waiting for Slurm job 100 (PENDING, reason Priority): other jobs come first (fair "
        "share, QOS priority); the pod starts when Slurm gets to it" + SAID_EXPECTED)
    assert rows["waits"]["expected"] == EXPECTED
    assert rows["badpart"]["job_id"] is None
    # No condition on a gated pod: its reason and job come from the bridge's event.
    assert rows["held"]["message"].startswith("waiting for Slurm job 102 (PENDING, reason ")
    assert "web" not in rows  # not scheduled by slurmbridge
    as_yaml = run(world, "status", "-o", "yaml")
    assert as_yaml.exit_code == 0 and yaml.safe_load(as_yaml.output) == json.loads(result.output)


def test_status_of_a_namespace_without_the_bridges_pods_says_so(world: FakeKube) -> None:
    result = run(world, "status", "-n", "other")
    assert (result.exit_code, result.output) == (0, "No pods of slurmbridge in namespace other.\n")
    assert json.loads(run(world, "status", "-n", "other", "-o", "json").output) == []
    assert len(json.loads(run(world, "status", "-A", "-o", "json").output)) == 4


# --- why -------------------------------------------------------------------------------------


def test_why_a_pending_pod_gives_slurms_reason_its_events_and_says_to_wait(
    world: FakeKube,
) -> None:
    result = run(world, "why", "waits")
    assert result.exit_code == 1  # waiting
    assert _lines(result.output) == [
        "Pod:        ns/waits",
        "State:      pending (Priority)",
        "Slurm job:  100 (PENDING, reason Priority)",
        "Slurm says: waiting for Slurm job 100 (PENDING, reason Priority): other jobs come "
        f"first (fair share, QOS priority); the pod starts when Slurm gets to it{SAID_EXPECTED} "
        "(5m ago)",
        f"Expected:   {EXPECTED} (Slurm's estimate, 5m ago)",
        "Age:        5m",
        "Asked:      account=research  gpus=2  qos=normal  slurm-user=alice",
        "Events:",  # nothing recorded on the pod until its job runs (the leader's one write)
        "  AGE   TYPE      REASON             FROM          MESSAGE",
        "  5m    Warning   FailedScheduling   slurmbridge   0/1 nodes are available: 1 waiting "
        "for Slurm job 100 (PENDING, reason None): Slurm has not looked at the job yet. "
        "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.",
        "  5m    Normal    SlurmPending       slurmbridge   waiting for Slurm job 100 (PENDING, "
        "reason Priority): other jobs come first (fair share, QOS priority); the pod starts "
        f"when Slurm gets to it{SAID_EXPECTED}",
        "Next:       Nothing to do: the pod starts as soon as Slurm job 100 starts; the reason "
        "above says what it waits for. Check again with `kubectl slurmbridge why`, or watch "
        "`kubectl get pod waits -n ns -w`.",
    ]


def test_why_a_running_pod_gives_its_node_gpus_and_job(world: FakeKube) -> None:
    result = run(world, "why", "pod/train")
    assert result.exit_code == 0  # placed
    assert _lines(result.output) == [
        "Pod:        ns/train",
        "State:      running",
        "Slurm job:  101 (RUNNING)",
        "Slurm says: Slurm job 101 allocated node1 (5m ago)",
        "Node:       node1 (Slurm node node1)",
        "GPUs:       4,5",
        "Age:        5m",
        "Asked:      account=research  gpus=2  qos=normal  slurm-user=alice",
        "Recorded:   cuda-visible-devices=0,1  gpu-ids=4,5  job-id=101  owner=uid-train  "
        "slurm-node=node1",
        "Events:",
        "  AGE   TYPE      REASON             FROM          MESSAGE",
        "  5m    Warning   FailedScheduling   slurmbridge   0/1 nodes are available: 1 waiting "
        "for Slurm job 101 (PENDING, reason None): Slurm has not looked at the job yet. "
        "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.",
        "  5m    Normal    Scheduled          slurmbridge   Successfully assigned ns/train to "
        "node1",
        "Next:       Nothing to do: it runs on node1 (Slurm node node1, GPUs 4,5) as Slurm job "
        "101.",
    ]


def test_why_a_pod_slurm_refused_gives_the_refusal_and_who_fixes_it(world: FakeKube) -> None:
    result = run(world, "why", "badpart")
    assert result.exit_code == 1
    refusal = ("Slurm refused the pod's job: Slurm has no partition 'nosuch' (or the account "
               "may not use it): an admin fixes the namespace's tenancy [Invalid partition "
               "name specified]")
    assert _lines(result.output)[:7] == [
        "Pod:        ns/badpart",
        "State:      refused (InvalidPartition)",
        "Slurm job:  none yet",
        f"Slurm says: {refusal} (5m ago)",
        "Age:        5m",
        "Asked:      account=research  partition=nosuch  qos=normal  slurm-user=alice",
        "Events:",  # no submit claim records an owner on the pod any more
    ]
    assert f"  5m    Warning   SlurmSubmitRefused   slurmbridge   {refusal}" in _lines(
        result.output)
    assert _lines(result.output)[-1].startswith(
        "Next:       Slurm refused the job as the pod asks for it (above).")


def test_why_a_workload_whose_pods_the_webhook_refused_shows_the_refusal(
    world: FakeKube,
) -> None:
    result = run(world, "why", "trainer")
    assert result.exit_code == 1
    assert _lines(result.output) == [
        "Pod:        ns/trainer",
        "State:      not found",
        "Refused at creation (events of its controller):",
        "  AGE   OBJECT        COUNT   MESSAGE",
        f"  5m    Job/trainer   1       {ADMISSION_REFUSAL}",
        "Next:       No pod ns/trainer: the API server refused to create it (above). Change what "
        "the message names in the pod template (or ask the admin who sets the namespace's "
        "policy); the controller retries on its own.",
    ]
    # A pod of that Job, by the name its controller would have given it, finds it too.
    assert "Job/trainer" in run(world, "why", "trainer-x7k2p").output


def test_why_a_pod_that_is_not_the_bridges_or_does_not_exist_says_so(world: FakeKube) -> None:
    web = run(world, "why", "web")
    assert web.exit_code == 1
    assert _lines(web.output) == [
        "Pod:        ns/web",
        "Scheduler:  default-scheduler (not slurmbridge)",
        "Next:       Slurm plays no part: ns/web is scheduled by default-scheduler. Set "
        "spec.schedulerName: slurmbridge, or create it in a namespace labelled "
        "slurmbridge.io/enabled=true.",
    ]
    ghost = run(world, "why", "ghost", "-o", "json")
    assert ghost.exit_code == 1
    answer = json.loads(ghost.output)
    assert (answer["found"], answer["bridge"], answer["refusals"]) == (False, False, [])
    assert answer["next"].startswith("No pod ns/ghost: it was never created, or was deleted.")


def test_why_as_json_and_yaml(world: FakeKube) -> None:
    result = run(world, "why", "train", "-o", "json", "--events", "1")
    assert result.exit_code == 0
    answer = json.loads(result.output)
    assert answer["status"]["state"] == "running" and answer["placed"] is True
    assert (answer["slurm_state"], answer["status"]["job_id"]) == ("RUNNING", 101)
    assert answer["asked"] == {"account": "research", "qos": "normal", "slurm-user": "alice",
                               "gpus": "2"}
    assert [e["reason"] for e in answer["events"]] == ["Scheduled"]
    assert answer["events"][0]["time"] == "2026-11-30T13:00:15Z"
    pending = run(world, "why", "waits", "-o", "yaml")
    assert pending.exit_code == 1
    answer = yaml.safe_load(pending.output)
    assert (answer["slurm_state"], answer["slurm_reason"]) == ("PENDING", "Priority")
    assert "expected_start" not in answer  # the bridge records none yet: nothing is shown


class Forbidding(FakeKube):
    """The apiserver with RBAC that lets the user list nothing of ``kinds``."""

    def __init__(self, world: FakeKube, *kinds: type[Any]) -> None:
        super().__init__()
        self.objects = world.objects
        self.kinds = kinds

    def list(self, res: Any, **kw: Any) -> Any:
        if res in self.kinds:
            raise api_error(403, f'{res.__name__.lower()}s is forbidden: User "alice" cannot '
                                 f'list resource "{res.__name__.lower()}s" in the namespace "ns"')
        return super().list(res, **kw)


def test_why_without_the_right_to_list_events_still_answers(world: FakeKube) -> None:
    result = run(Forbidding(world, Event), "why", "waits")
    assert result.exit_code == 1
    assert "Events: not readable (your RBAC does not allow listing events here)" in result.output
    assert "Slurm job:  100 (PENDING, reason Priority)" in result.output  # the condition


# --- nodes -----------------------------------------------------------------------------------


def test_nodes_map_kubernetes_to_slurm_and_say_who_drained_and_tainted(world: FakeKube) -> None:
    result = run(world, "nodes")
    assert result.exit_code == 0, result.output
    taint = "slurmbridge.io/slurm-unavailable=drain:NoSchedule (slurmbridge)"
    assert _lines(result.output) == [
        "NODE         SLURM NODE   SLURM STATE   SLURM REASON                          SET BY"
        "        KUBERNETES",
        "kube-node2   node2        DRAIN+IDLE    slurmbridge: cordoned in Kubernetes   "
        f"slurmbridge   cordoned (kubernetes admin), {taint}",
        f"kube-node3   node3        DRAIN+IDLE    PSU swap (ops)                        "
        f"slurm-admin   {taint}",
        "login        -            -             -                                     -      "
        "       dedicated=login:NoSchedule (other)",
        "node1        node1        MIXED         -                                     -      "
        "       -",
    ]
    rows = {r["node"]: r for r in json.loads(run(world, "nodes", "-o", "json").output)}
    assert rows["kube-node3"]["slurm_available"] == "False"
    assert rows["node1"]["taints"] == [
        {"key": keys.MANAGED_TAINT, "value": "", "effect": "NoSchedule", "set_by": "slurmbridge"}]
    assert rows["login"]["slurm_node"] == ""


# --- errors and exit codes -------------------------------------------------------------------


def test_errors_exit_2_and_say_what_to_do(world: FakeKube) -> None:
    forbidden = run(Forbidding(world, Pod), "status")
    assert forbidden.exit_code == 2
    assert 'pods is forbidden: User "alice"' in forbidden.output
    assert "needs RBAC to get and list pods and list events" in forbidden.output
    down = FakeKube()
    down.down = True
    unreachable = run(down, "why", "waits")
    assert unreachable.exit_code == 2
    assert "cannot reach the API server at https://apiserver.test:6443" in unreachable.output
    usage = run(world, "status", "-n", NS, "-A")
    assert usage.exit_code == 2 and "-n and -A exclude each other" in usage.output
    assert run(world, "why").exit_code == 2  # no pod named


def test_connection_options_go_before_or_after_the_command(world: FakeKube) -> None:
    seen: list[Target] = []

    @asynccontextmanager
    async def connect(target: Target) -> AsyncIterator[Session]:
        seen.append(target)
        yield Session(world, NS, "https://apiserver.test:6443", NOW)

    for args in (["--kubeconfig", "/k", "status", "--context", "lab"],
                 ["status", "--kubeconfig", "/k", "--context", "lab"]):
        assert CliRunner().invoke(kubectl.main, args, obj=connect).exit_code == 0
    assert seen == [Target("/k", "lab")] * 2


def test_a_missing_kubeconfig_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "nothing"))
    result = CliRunner().invoke(kubectl.main, ["status"])
    assert result.exit_code == 2
    assert "no file of KUBECONFIG exists" in result.output and "--kubeconfig" in result.output


def test_kubeconfig_files_merge_as_kubectl_merges_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    first.write_text(yaml.safe_dump({
        "current-context": "lab",
        "contexts": [{"name": "lab", "context": {"cluster": "site", "user": "me",
                                                 "namespace": "team-a"}}],
    }))
    second.write_text(yaml.safe_dump({
        "current-context": "other",
        "clusters": [{"name": "site", "cluster": {"server": "https://site:6443"}}],
        "users": [{"name": "me", "user": {"token": "t"}}],
        "contexts": [{"name": "lab", "context": {"cluster": "nowhere"}}],
    }))
    monkeypatch.setenv("KUBECONFIG", f"{first}:{tmp_path / 'missing'}:{second}")
    config = kubectl.load_kubeconfig(Target())
    assert (config.context_name, config.namespace, config.cluster.server) == (
        "lab", "team-a", "https://site:6443")


def test_why_a_gated_group_member_and_a_preempted_pod(world: FakeKube) -> None:
    kube = FakeKube()
    kube.add(PodBuilder("w0", NS).group("allreduce", 2).label(keys.GROUP_RANK, "0")
             .gated("kueue.x-k8s.io/admission").build())
    victim = _pod("victim", **{keys.JOB_ID: "7"})
    assert victim.metadata is not None
    victim.metadata.deletionTimestamp = T0
    kube.add(victim)

    async def preempt() -> None:  # what the lifecycle controller writes, in its words
        await set_slurm_condition(kube, NS, "victim", allocated=False,
                                  reason=keys.REASON_PREEMPTED,
                                  message="preempted by Slurm: job 7 (QOS low) gave its "
                                          "resources to a higher-priority job")

    asyncio.run(preempt())
    gated = run(kube, "why", "w0")
    assert gated.exit_code == 1
    assert "Group:      allreduce (2 pods, rank 0)" in _lines(gated.output)
    assert f"Gates:      kueue.x-k8s.io/admission, {keys.SLURM_GATE}" in _lines(gated.output)
    # Kueue's gate is named as what holds the pod; the bridge's own is not something to wait on.
    assert "Next:       The pod has scheduling gates (kueue.x-k8s.io/admission):" in gated.output
    evicted = run(kube, "why", "victim")
    assert evicted.exit_code == 1
    assert "State:      terminating (PreemptedBySlurm)" in _lines(evicted.output)
    assert "Next:       Slurm ended or preempted Slurm job 7 (above)" in evicted.output


def test_why_a_gated_pending_pod_takes_its_job_from_the_bridges_event(world: FakeKube) -> None:
    """No condition and no job annotation before its release: the event names the job."""
    result = run(world, "why", "held", "-o", "json")
    assert result.exit_code == 1, result.output  # waiting
    why = json.loads(result.output)
    assert (why["status"]["job_id"], why["slurm_state"]) == (102, "PENDING")
    assert why["gates"] == [keys.SLURM_GATE]


def test_why_a_member_of_a_pending_heterogeneous_job_names_its_component() -> None:
    """Issue 43, item 4: the member's group line names its component, and the bridge's words
    give that component's own Slurm state and reason."""
    kube = FakeKube()
    kube.add(PodBuilder("worker-0", NS).uid("uid-w0").group("mix", 3)
             .label(keys.GROUP_RANK, "1").label(keys.GROUP_COMPONENT, "workers")
             .annotate(keys.GROUP_COMPONENTS, "launcher=1,workers=2").gated().build())
    said = ("waiting for Slurm job 29 (PENDING, reason Resources), component workers (+1) of "
            "heterogeneous job 29: no node has the CPUs, memory or GPUs free right now")
    kube.add(_event("worker-0", "Pod", keys.EventReason.PENDING.value, said, uid="uid-w0"))
    out = run(kube, "why", "worker-0")
    assert "Group:      mix (3 pods, rank 1, component workers (+1))" in _lines(out.output), \
        out.output
    assert "Slurm job:  29 (PENDING, reason Resources)" in _lines(out.output), out.output


def test_status_shows_each_member_as_its_component_of_the_heterogeneous_job() -> None:
    """Issue 43: ``29+0``, ``29+1`` as ``slurmbridge status`` and squeue show them, from what
    the bridge wrote: a pending member's words, a released member's record.  A member of a
    group whose parts ask alike (one ordinary job) shows the job alone."""
    kube = FakeKube()
    parts = {keys.GROUP_COMPONENTS: "launcher=1,workers=2"}

    def member(name: str, group: str, rank: int, component: str) -> PodBuilder:
        return (PodBuilder(name, NS).uid(f"uid-{name}").scheduler(keys.SCHEDULER_NAME)
                .group(group, 3).label(keys.GROUP_RANK, str(rank))
                .label(keys.GROUP_COMPONENT, component).annotations(parts))

    kube.add(member("launcher", "mix", 0, "launcher").gated().build())
    said = ("waiting for Slurm job 29 (PENDING, reason Resources), component launcher (+0) of "
            "heterogeneous job 29: no node has the CPUs, memory or GPUs free right now")
    kube.add(_event("launcher", "Pod", keys.EventReason.PENDING.value, said, uid="uid-launcher"))
    record = {keys.JOB_ID: "29", keys.SLURM_NODE: "node2", keys.GPU_IDS: "2,3"}
    kube.add(member("worker-0", "mix", 1, "workers").annotations(record)
             .annotate(keys.JOB_COMPONENT, "1").node("node2").build())
    kube.add(member("alike-1", "alike", 1, "workers")
             .annotations({keys.JOB_ID: "31", keys.SLURM_NODE: "node3", keys.GPU_IDS: ""})
             .node("node3").build())
    result = run(kube, "status")
    assert result.exit_code == 0, result.output
    jobs = {line.split()[0]: line.split()[1] for line in _lines(result.output)[1:]}
    assert jobs == {"ns/launcher": "29+0", "ns/worker-0": "29+1", "ns/alike-1": "31"}, \
        result.output
    rows = {r["pod"]: r for r in json.loads(run(kube, "status", "-o", "json").output)}
    assert [(rows[n]["job_id"], rows[n]["component"], rows[n]["offset"])
            for n in ("launcher", "worker-0")] == [(29, "launcher", 0), (29, "workers", 1)]
    assert "component" not in rows["alike-1"] and "offset" not in rows["alike-1"]
