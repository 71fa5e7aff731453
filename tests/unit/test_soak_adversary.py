"""The adversarial soak's parts that need no cluster (issue 41, Build item 9): the checks that
judge what an attack did, each flagging a crafted violation and passing a clean state; what
a snapshot reads off pods and claims; the tenant's schedule, victims and what it sends; how an
attempt's answer is counted; and the RESULTS rows kept beside the earlier soak's."""

from pathlib import Path
from typing import Any, cast

import pytest
from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import Status
from lightkube.resources.resource_v1 import ResourceClaim

from benchmarks import report
from benchmarks.common import Figure, Outcome
from benchmarks.run import beside, merged
from benchmarks.soak import adversary, attacks
from benchmarks.soak.attacks import CASES, Made, Result, attack_schedule
from benchmarks.soak.invariants import (
    Bound,
    ClaimObs,
    JobObs,
    PodObs,
    Snapshot,
    check_all,
)
from benchmarks.soak.observe import claim_obs, node_gpus, pod_obs
from benchmarks.soak.tracker import Violation
from bridge import keys
from slurmbridge_devkit.builders.pods import PodBuilder

NS, OTHER = "soak", "soak-adversary"
NOW = 1_000_000.0
EIGHT = {f"node{k}": tuple(range(8)) for k in (1, 2)}


def job(job_id: str, owner: str = "", *, user: str = "slurm", node: str = "node1",
        gpus: tuple[int, ...] = (), state: str = "RUNNING", nodes: tuple[str, ...] = ()) -> JobObs:
    held = nodes or (node,)
    return JobObs(job_id, f"k8s:{NS}/{job_id}" if owner else "native", state, user, owner,
                  held, {n: gpus for n in held} if gpus else {})


def pod(name: str, job_id: str = "", **kw: Any) -> PodObs:
    base: dict[str, Any] = {"uid": f"uid-{name}", "created": NOW - 5, "phase": "Running",
                            "node": "kube-node1", "slurm_node": "node1", "job_id": job_id}
    return PodObs(name, **(base | kw))


def clean() -> Snapshot:
    """A GPU pod in its job, a 2-node group one member a node, alice's job on GPU 2, a pod of
    another tenant on a Node Slurm does not manage, and an allocated claim under a running
    pod: nothing wrong."""
    return Snapshot(NOW, NS, (
        pod("a", "10", gpu_ids=(0, 1), gpus_asked=2, namespace=NS),
        pod("g-0", "12", group="g"),
        pod("g-1", "12", group="g", node="kube-node2", slurm_node="node2"),
        pod("claimed", "13", claims=("claimed-gpu",)),
    ), (
        job("10", "uid-a", gpus=(0, 1)),
        JobObs("12", f"k8s:{NS}/g", "RUNNING", "slurm", f"group:{NS}/g", ("node1", "node2")),
        job("13", "uid-claimed"),
        job("20", user="alice", gpus=(2,)),
    ), others=(
        pod("plain", namespace=OTHER, node="soak-adversary-plain", slurm_node="",
            visible=(("main", "all"),), claims=("own",)),
    ), claims=(
        ClaimObs(NS, "claimed-gpu", ("kube-node1/gpu-0",), "13"),
        ClaimObs(OTHER, "own", ("plain/gpu-0",)),
    ), node_gpus=EIGHT, tenants={NS: "slurm", OTHER: "researcher"})


def found(snap: Snapshot) -> dict[str, Bound]:
    return {s.invariant: s.bound for s in check_all(snap, frozenset())}


def plus(snap: Snapshot, pods: tuple[PodObs, ...] = (), jobs: tuple[JobObs, ...] = (), *,
         others: tuple[PodObs, ...] = (), claims: tuple[ClaimObs, ...] | None = None,
         tenants: dict[str, str] | None = None) -> Snapshot:
    return Snapshot(snap.at, NS, snap.pods + pods, snap.jobs + jobs, snap.others + others,
                    snap.claims if claims is None else claims, snap.node_gpus,
                    snap.tenants if tenants is None else tenants)


def test_a_clean_state_with_foreign_pods_claims_and_tenants_raises_no_suspect() -> None:
    assert check_all(clean(), frozenset()) == []


# --- no two running things on one GPU index --------------------------------------------------


def test_a_foreign_pod_asking_every_gpu_of_a_managed_node_holds_them_all() -> None:
    """Case 5: a default-scheduler pod on a Slurm node (its nodeName preset, or placed there
    by kube-scheduler) with NVIDIA_VISIBLE_DEVICES=all takes the GPUs Slurm gave pod a's job
    and alice's."""
    squatter = pod("adv5-1", namespace=OTHER, visible=(("main", "all"),))
    suspects = check_all(plus(clean(), others=(squatter,)), frozenset())
    assert {(s.invariant, s.bound) for s in suspects} == {
        ("two running things on one GPU", Bound.STRICT)}
    assert {s.detail.split(" held by")[0] for s in suspects} == {
        "node1 GPU 0", "node1 GPU 1", "node1 GPU 2"}
    assert all("adv5-1 (main: NVIDIA_VISIBLE_DEVICES=all)" in s.detail for s in suspects)


def test_a_gpu_list_or_none_in_the_environment_holds_what_it_names() -> None:
    listed = pod("adv5-2", namespace=OTHER, visible=(("main", "5,2"),))
    assert found(plus(clean(), others=(listed,))) == {
        "two running things on one GPU": Bound.STRICT}
    idle = pod("adv5-3", namespace=OTHER, visible=(("main", "none"),))
    stopped = pod("adv5-4", namespace=OTHER, visible=(("main", "all"),), phase="Succeeded")
    free = pod("adv5-5", namespace=OTHER, visible=(("main", "3"),))
    assert found(plus(clean(), others=(idle, stopped, free))) == {}


def test_an_ephemeral_container_asking_every_gpu_holds_its_nodes_others() -> None:
    """Case 6: pod a holds GPUs 0-1 through its job; its debug container's "all" also takes
    GPU 2, alice's."""
    debugged = pod("a", "10", gpu_ids=(0, 1), gpus_asked=2, namespace=NS,
                   visible=(("adv6-3-debug", "all"),))
    base = clean()
    snap = Snapshot(NOW, NS, (debugged, *base.pods[1:]), base.jobs, base.others, base.claims,
                    EIGHT, base.tenants)
    suspects = check_all(snap, frozenset())
    assert [s.detail.split(" held by")[0] for s in suspects] == ["node1 GPU 2"]
    assert "adv6-3-debug: NVIDIA_VISIBLE_DEVICES=all" in suspects[0].detail
    alone = Snapshot(NOW, NS, (debugged,), (job("10", "uid-a", gpus=(0, 1)),),
                     node_gpus={"node1": (0, 1)})
    assert check_all(alone, frozenset()) == []  # nothing else on the node's GPUs


def test_a_second_pod_released_into_a_taken_rank_shares_its_gpus() -> None:
    """Case 1: two running pods of one job told the same GPUs on one node are two things,
    and two pods in one seat."""
    second = pod("adv1-4", "10", gpu_ids=(0, 1), gpus_asked=2)
    assert found(plus(clean(), (second,))) == {
        "two running things on one GPU": Bound.STRICT,
        "two running pods in one seat of a job": Bound.STRICT}


# --- one seat a pod; the GPUs it asked for -----------------------------------------------------


def test_two_members_on_one_node_of_their_job_are_flagged_unless_one_is_stopping() -> None:
    joined = pod("adv1-5", "12", group="g")  # on node1, where g-0 runs
    suspects = check_all(plus(clean(), (joined,)), frozenset())
    assert [(s.invariant, s.detail) for s in suspects] == [
        ("two running pods in one seat of a job", "job 12 on node1: pods ['adv1-5', 'g-0']")]
    assert check_all(plus(clean(), (pod("g-0b", "12", group="g", deleting=True),)),
                     frozenset()) == []


def test_a_gpu_worker_run_without_its_gpus_is_flagged() -> None:
    """Case 2: the job was built from the CPU launcher; the worker asked for one GPU."""
    worker = pod("adv2-6-1", "30", group="adv2-6", gpus_asked=1, node="kube-node2",
                 slurm_node="node2")
    assert found(plus(clean(), (worker,), (job("30", "group:soak/adv2-6", node="node2"),))) == {
        "pod running without the GPUs it asked for": Bound.STRICT}


# --- no pod running in a job its namespace does not own --------------------------------------


def test_a_pod_running_in_another_users_job_is_flagged() -> None:
    """Case 3: the forged job runs as researcher; the soak's namespace runs as slurm."""
    forged = JobObs("40", f"k8s:{OTHER}/adv3-7", "RUNNING", "researcher", f"group:{NS}/v",
                    ("node3",))
    victim = pod("v-0", "40", group="v", node="kube-node3", slurm_node="node3")
    suspects = check_all(plus(clean(), (victim,), (forged,)), frozenset())
    assert [(s.invariant, s.bound) for s in suspects] == [
        ("pod running in a job its namespace does not own", Bound.STRICT)]
    assert "user researcher" in suspects[0].detail and "adv3-7" in suspects[0].detail
    unmapped = plus(clean(), (victim,), (forged,), tenants={})
    assert check_all(unmapped, frozenset()) == []  # no tenancy given: not judged


# --- no allocation cleared under a running pod ------------------------------------------------


def test_a_running_pods_claim_cleared_or_gone_is_flagged() -> None:
    """Case 4: the bridge freed a claim labelled with an ended job; its pod still runs."""
    cleared = (ClaimObs(NS, "claimed-gpu", ("kube-node1/gpu-0",), "13"),
               ClaimObs(OTHER, "own", (), "7"))
    suspects = check_all(plus(clean(), claims=cleared), frozenset())
    assert [(s.invariant, s.bound) for s in suspects] == [
        ("allocation cleared under a running pod", Bound.STRICT)]
    assert "soak-adversary/own without an allocation (labelled job-id 7)" in suspects[0].detail
    gone = check_all(plus(clean(), claims=cleared[:1]), frozenset())
    assert "soak-adversary/own gone" in gone[0].detail
    ended = Snapshot(NOW, NS, (), (), (pod("plain", namespace=OTHER, phase="Succeeded",
                                           claims=("own",)),), cleared)
    assert check_all(ended, frozenset()) == []


# --- what a snapshot reads ---------------------------------------------------------------------


def test_a_snapshot_reads_own_gpu_variables_claims_and_asks_off_the_pod() -> None:
    debug = {"name": "adv6-1-debug", "image": "busybox",
             "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}
    bridge_env = {"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {"fieldRef": {
        "fieldPath": f"metadata.annotations['{keys.GPU_IDS}']"}}}
    built = (PodBuilder("a", NS).uid("u-a").node("kube-node1").running()
             .containers({"name": "main", "image": "busybox", "env": [bridge_env]})
             .annotations({keys.GPUS: "2", keys.GPU_IDS: "0-1", keys.JOB_ID: "10"})
             .claim("gpu", resourceClaimName="mine").spec(ephemeralContainers=[debug])
             .label("batch.kubernetes.io/job-name", "gang-3").build())
    seen = pod_obs(built, set(), {"kube-node1": "node1"})
    assert (seen.namespace, seen.slurm_node, seen.gpu_ids, seen.gpus_asked) == (
        NS, "node1", (0, 1), 2)
    assert seen.visible == (("adv6-1-debug", "all"),)  # the bridge's own fieldRef is not
    assert (seen.claims, seen.workload) == (("mine",), "gang-3")
    claim = cast(ResourceClaim, ResourceClaim.from_dict({
        "metadata": {"name": "mine", "namespace": NS, "labels": {keys.CLAIM_JOB_LABEL: "9"}},
        "spec": {}, "status": {"allocation": {"devices": {"results": [
            {"request": "gpu", "driver": "d", "pool": "kube-node1", "device": "gpu-0"}]}}}}))
    assert claim_obs(claim) == ClaimObs(NS, "mine", ("kube-node1/gpu-0",), "9")


def test_each_slurm_nodes_gpus_come_from_its_configured_gres() -> None:
    class Sinfo:
        def admin(self, *args: str, check: bool = True) -> str:
            return "node1 gpu:8,shard:32\nnode2 gpu:a:4(S:0),gpu:b:4\nnode3 (null)\n"

    assert node_gpus(Sinfo()) == {  # type: ignore[arg-type]  # the one call it makes
        "node1": tuple(range(8)), "node2": tuple(range(8)), "node3": ()}


# --- the tenant: schedule, victims, what it sends ---------------------------------------------


def test_a_seed_names_the_attacks_and_every_case_comes_within_four_minutes() -> None:
    one, again, other = (attack_schedule(1, 1800), attack_schedule(1, 1800),
                         attack_schedule(2, 1800))
    assert one == again and one != other
    for seed in (1, 2, 3):
        assert {a.case for a in attack_schedule(seed, 240)} == set(CASES)
    variants = {(a.case, a.variant) for a in one}
    assert variants == {(c, v) for c, (_, vs) in CASES.items() for v in range(len(vs))}
    assert len({a.name for a in one}) == len(one)


def test_victims_are_another_tenants_and_placed_or_waiting_as_each_case_needs() -> None:
    snap = plus(clean(), (
        pod("adv1-9", "10", gpu_ids=(0, 1)),  # the adversary's own: never a victim
        pod("w-0", group="w", node="", slurm_node="", phase="Pending", gpus_asked=1),
        pod("w-1", group="w", node="", slurm_node="", phase="Pending", gpus_asked=1),
        pod("lone", phase="Pending", node="", slurm_node="", gpus_asked=2),
    ), (job("99", "uid-x", state="COMPLETED"), job("98", state="CANCELLED")))
    assert attacks.placed_group(snap, 0.0) == ("g", [snap.pods[1], snap.pods[2]])
    assert attacks.forge_victim(snap, 0, 0.0) == (f"group:{NS}/w", 2, 1)
    assert attacks.forge_victim(snap, 1, 0.0) == ("uid-lone", 1, 2)
    ended = attacks.ended_job(snap)
    assert ended is not None and ended.job_id == "99"
    assert attacks.busy_node(snap, {"kube-node1": "node1", "kube-node3": "node3"}, 0.9) == (
        "kube-node1")
    victim = attacks.debug_victim(snap, 0.0)
    assert victim is not None and victim.name == "a"


def test_what_the_tenant_sends_is_what_each_case_names() -> None:
    rank = attacks.rank_taken_pod("adv1-1", "g", 2, 1).to_dict()
    assert rank["metadata"]["labels"] == {keys.GROUP: "g", keys.GROUP_SIZE: "2",
                                          keys.GROUP_RANK: "0"}
    owned = attacks.owner_ref_pod("adv1-2", "gang-3", "u-job").to_dict()["metadata"]
    assert owned["ownerReferences"][0] | {"kind": "Job", "uid": "u-job", "controller": True} == (
        owned["ownerReferences"][0])
    assert owned["annotations"] == {keys.JOB_COMPLETION_INDEX: "0"}
    launcher, *workers = [p.to_dict() for p in attacks.mixed_group("adv2-3")]
    assert launcher["metadata"]["labels"][keys.GROUP_RANK] == "0"
    assert [w["spec"]["containers"][0]["resources"]["limits"][keys.GPU_RESOURCE]
            for w in workers] == ["1", "1"]
    assert keys.GPU_RESOURCE not in launcher["spec"]["containers"][0]["resources"]["limits"]
    argv = attacks.forged_sbatch(f"k8s:{OTHER}/adv3-4", f"group:{NS}/g", 2, 1)
    assert argv[argv.index("-J") + 1] == f"k8s:{OTHER}/adv3-4"
    assert f"--comment={keys.COMMENT_OWNER}group:{NS}/g" in argv and "--gres=gpu:1" in argv
    preset, tolerating = (attacks.foreign_pod("adv5-5", v, "kube-node2").to_dict()["spec"]
                          for v in (0, 1))
    assert preset["nodeName"] == "kube-node2" and "schedulerName" not in preset
    assert tolerating["tolerations"][0]["key"] == keys.MANAGED_TAINT
    for spec in (preset, tolerating):
        assert spec["containers"][0]["env"] == [{"name": "NVIDIA_VISIBLE_DEVICES",
                                                 "value": "all"}]
    debug = attacks.debug_patch("adv6-6-debug")["spec"]["ephemeralContainers"][0]
    assert debug["name"] == "adv6-6-debug" and debug["env"][0]["value"] == "all"


def test_violations_are_told_by_the_case_whose_objects_they_name() -> None:
    def violation(detail: str) -> Violation:
        return Violation("x", detail, 1, NOW, NOW, 10.0, ())

    counted = attacks.cases_of([violation("node1 GPU 2 held by ['pod adv5-3 (main: ...)']"),
                                violation("job 12 on node1: pods ['adv1-5', 'g-0']"),
                                violation("pod a Running; job 3 CANCELLED")])
    assert (counted[5], counted[1], counted[0]) == (1, 1, 1)


def test_what_an_attempt_made_is_told_from_the_snapshot_before_it_is_undone() -> None:
    snap = plus(clean(), (pod("adv1-4", "10", gpu_ids=(0, 1)),))
    made = Made(pods=[(NS, "adv1-4"), (NS, "adv1-gone")], claims=[(OTHER, "own")], jobs=["10"])
    told = made.describe(snap)
    assert "pod adv1-4 Running on kube-node1 (job 10 on node1, GPUs [0, 1])" in told
    assert "pod adv1-gone gone" in told and "claim own allocated ['plain/gpu-0']" in told
    assert "job 10 RUNNING, pods in it: ['a', 'adv1-4']" in told


# --- how an attempt is counted ----------------------------------------------------------------


def _api_error(code: int, message: str) -> ApiError:
    return ApiError(status=Status(code=code, status="Failure", message=message))


async def test_a_refusal_counts_as_refused_and_an_absent_api_is_tried_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(adversary, "AWAY_RETRIES", (3, 0.0))
    monkeypatch.setattr(adversary, "NO_VICTIM_WAIT", (0.0, 0.0))
    answers: list[Exception | str] = [
        _api_error(500, 'Internal error occurred: failed calling webhook "x"'),
        ConnectionError("apiserver restarting"), "created"]

    async def flaky() -> str:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert await adversary.attempt(flaky) == (Result.ADMITTED, "created")

    async def denied() -> str:
        raise _api_error(403, 'admission webhook "pods" denied the request: rank 0 is taken')

    result, detail = await adversary.attempt(denied)
    assert result is Result.REFUSED and "rank 0 is taken" in detail

    async def slurm_says_no() -> str:
        raise adversary.Refused("Slurm: Invalid account")

    async def nobody() -> str:
        raise adversary.NoVictim("no group placed")

    async def down() -> str:
        raise adversary.Away("Unable to contact slurm controller")

    assert await adversary.attempt(slurm_says_no) == (Result.REFUSED, "Slurm: Invalid account")
    assert await adversary.attempt(nobody) == (Result.SKIPPED, "no group placed")
    assert (await adversary.attempt(down))[0] is Result.FAILED


# --- RESULTS.md keeps the earlier soak's rows -------------------------------------------------


def test_the_adversarial_rows_join_the_soak_section_beside_the_earlier_ones() -> None:
    before = Outcome("SOAK", "soak", figures=[
        Figure("[seed 1] invariant violations", "violations", [0.0]),
        Figure("[adversarial seed 1] invariant violations", "violations", [3.0])],
        notes=["[seed 1] seed 1, 30 minutes"], command="python -m benchmarks.run --seed 1",
        date="2026-12-04 03:05 UTC", conditions=["Seed 1 ran beside a helper's unit tests."])
    added = Outcome("SOAK", "soak", figures=[
        Figure("[adversarial seed 1] invariant violations", "violations", [0.0])],
        notes=["[adversarial seed 1] attempt ..."],
        command="python -m benchmarks.run --seed 1 --adversarial", date="2026-12-05 01:00 UTC")
    merged = beside(before, added)
    assert [(f.name, f.samples) for f in merged.figures] == [
        ("[seed 1] invariant violations", [0.0]),
        ("[adversarial seed 1] invariant violations", [0.0])]
    assert merged.notes[0] == "[seed 1] seed 1, 30 minutes"
    assert "--adversarial" in merged.notes[1] and merged.notes[-1] == added.notes[0]
    assert (merged.command, merged.date, merged.conditions) == (
        before.command, before.date, before.conditions)
    assert [f.date for f in merged.figures] == [before.date, added.date]
    assert beside(None, added) is added


def test_a_soak_run_in_another_clone_is_merged_beside_and_a_missing_section_named(
    tmp_path: Path,
) -> None:
    ours = Outcome("SOAK", "soak", figures=[Figure("[seed 1] invariant violations", "v", [0.0])],
                   notes=["[seed 1] ran"], date="2026-12-04 03:05 UTC")
    added = Outcome("SOAK", "soak", date="2026-12-05 03:40 UTC", command="c --adversarial",
                    figures=[Figure("[adversarial seed 2] invariant violations", "v", [0.0])],
                    notes=["[adversarial seed 2] ran"])
    other = tmp_path / "results.json"
    report.save(other, {"SOAK": beside(ours, added)})  # what the other clone wrote
    stored = merged({"SOAK": ours, "B3": Outcome("B3", "b3")}, other, ["SOAK"])
    soak = stored["SOAK"]
    assert [(f.name, f.date) for f in soak.figures] == [
        ("[seed 1] invariant violations", ours.date),
        ("[adversarial seed 2] invariant violations", added.date)]
    assert soak.notes[0] == "[seed 1] ran" and soak.notes.count("[seed 1] ran") == 1
    assert "c --adversarial" in soak.notes[1] and soak.notes[2] == "[adversarial seed 2] ran"
    assert (soak.command, soak.date) == (ours.command, ours.date) and "B3" in stored
    with pytest.raises(SystemExit, match="holds no B1"):
        merged(stored, other, ["B1"])


# --- what only the tenant sees: its own job cancelled ------------------------------------------


class ForgersSlurm:
    """Slurm as the tenant meets it: sbatch answers a job id; squeue says the job was
    cancelled (by someone: the forger has not cancelled it yet)."""

    user = "slurm"

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []

    def admin(self, *args: str, check: bool = True, timeout: float = 60) -> str:
        self.calls.append(args)
        return {"sbatch": "501\n", "squeue": "CANCELLED\n"}.get(
            next((a for a in args if a in ("sbatch", "squeue", "scancel")), ""), "")


async def test_the_tenant_reports_its_forged_job_cancelled_before_it_cancels_it(
    tmp_path: Any,
) -> None:
    slurm = ForgersSlurm()
    told: list[tuple[str, str]] = []
    snap = plus(clean(), (pod("w-0", group="w", node="", slurm_node="", phase="Pending"),))
    tenant = adversary.Adversary(
        cast(Any, slurm), cast(Any, None), cast(Any, None), NS, 1, {}, tmp_path / "tenancy",
        lambda: snap, lambda invariant, detail: told.append((invariant, detail)))
    attack = attacks.Attack(at=0.0, case=3, variant=0, hold=0.0, pick=0.0, n=1)
    await tenant.run([attack], load_start=NOW)
    await tenant.cleanup()
    [done] = tenant.attempts
    assert done.result is Result.ADMITTED and "job 501" in done.detail
    assert "group:soak/w" in done.detail  # the waiting group's owner, forged
    assert told == [(adversary.FOREIGN_CANCEL, "job 501 (k8s:/adv3-1, Slurm user researcher) "
                     "was cancelled before its user cancelled it")]
    assert slurm.calls[-1] == ("runuser", "-u", "researcher", "--", "scancel", "501")
