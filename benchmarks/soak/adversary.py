"""The adversarial tenant (issue 41, Build item 9): on its seed's schedule, beside the faults,
it tries cases 1-6 as a user would, and each attempt is recorded (refused by the API or
Slurm, admitted, or skipped for want of a victim).  The invariants then judge what an
admitted attempt did.

Who it is: a user of the victims' namespace (pods, pods/ephemeralcontainers, reading Jobs)
and of its own namespace (pods, ResourceClaims), each a ServiceAccount with a Role and a token,
as the dev kit makes them; and the Slurm user ``researcher``, whom the tenancy file maps to its
own namespace while it runs.  Its own namespace carries the e2e label, so the bridge's
webhooks and admission policy cover it as they cover every namespace of a cluster.

For case 4 the harness plays a DRA driver (attacks.plain_node_driver) on a Node Slurm does not
manage, so that kube-scheduler allocates the tenant's claim; the bridge's own claims are not
needed for the attack, only its freeing, which lists claims by label cluster-wide.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from lightkube import AsyncClient, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import Node, Pod
from lightkube.resources.resource_v1 import ResourceClaim
from lightkube.types import PatchType

from benchmarks import live
from benchmarks.common import Figure
from benchmarks.soak import attacks
from benchmarks.soak.attacks import CASES, FORGER, FORGER_ACCOUNT, Attack, Attempt, Made, Result
from benchmarks.soak.invariants import Snapshot
from benchmarks.soak.kubelet import Kubelet
from benchmarks.soak.tracker import Violation
from bridge import keys
from slurmbridge_devkit.e2e import create_pod
from slurmbridge_devkit.kube import ControlPlane
from slurmbridge_devkit.kubelet import create_node
from slurmbridge_devkit.namespaces import namespace_user
from slurmbridge_devkit.slurm import SlurmTarget
from slurmbridge_devkit.stack import make_e2e_namespace

PLAIN_NODE = "soak-adversary-plain"
NO_VICTIM_WAIT = (20.0, 5.0)  # seconds to wait for a victim, and between looks
AWAY_RETRIES = (6, 10.0)  # tries while the API or Slurm is away (an apiserver restart can
# take 40 s here), and seconds between
FOREIGN_CANCEL = "a job the bridge does not own was cancelled"
SLURM_AWAY = ("Unable to contact", "Socket timed out", "Zero Bytes", "Connection refused")


class NoVictim(Exception):
    """Nothing alive to try the case on (yet)."""


class Away(Exception):
    """The apiserver, a webhook or Slurm did not answer: the attempt did not happen."""


class Refused(Exception):
    """Slurm refused what the tenant sent (the apiserver's refusals come as ApiError)."""


class NotDone(Exception):
    """The attempt's own setup did not happen (kube-scheduler never allocated the claim)."""


def refusal(exc: ApiError) -> str | None:
    """The apiserver's refusal (webhook, admission policy, RBAC, validation), or None when the
    answer says a component was away (a webhook down, the apiserver restarting)."""
    code, message = exc.status.code or 0, str(exc.status.message or exc)
    if code >= 500 or "failed calling webhook" in message:
        return None
    return f"{code} {message[:400]}"


async def attempt(work: Callable[[], Awaitable[str]]) -> tuple[Result, str]:
    """One attempt: ``work`` sends what the tenant sends and says what it did.  Waits a while
    for a victim, retries while the API or Slurm is away; the API's or Slurm's refusal is the
    result, not a failure."""
    wait, look = NO_VICTIM_WAIT
    tries, pause = AWAY_RETRIES
    deadline, why = time.monotonic() + wait, ""
    while tries > 0:
        try:
            return Result.ADMITTED, await work()
        except NoVictim as exc:
            if time.monotonic() >= deadline:
                return Result.SKIPPED, str(exc)
            await asyncio.sleep(look)
        except Refused as exc:
            return Result.REFUSED, str(exc)
        except NotDone as exc:
            return Result.FAILED, str(exc)
        except ApiError as exc:
            refused = refusal(exc)
            if refused is not None:
                return Result.REFUSED, refused
            tries, why = tries - 1, str(exc)[:300]
            await asyncio.sleep(pause)
        except Exception as exc:  # Away, or a connection the apiserver's restart broke
            tries, why = tries - 1, f"{type(exc).__name__}: {str(exc)[:300]}"
            await asyncio.sleep(pause)
    return Result.FAILED, f"the API or Slurm was away: {why}"


@dataclass
class Adversary:
    slurm: SlurmTarget
    kube: AsyncClient  # the harness's own (admin): setup, victims, reading
    cp: ControlPlane
    victims: str  # the load's namespace
    seed: int
    kube_nodes: dict[str, str]  # Kubernetes node -> Slurm node
    tenancy_file: Path
    last: Callable[[], Snapshot | None]  # the checker's latest snapshot, to pick victims
    # Tells a violation only the tenant can see (invariant, detail): its own job cancelled.
    violation: Callable[[str, str], None] = lambda invariant, detail: None
    own: str = ""  # its own namespace (made in start)
    attempts: list[Attempt] = field(default_factory=list)
    kubelet: Kubelet | None = None  # plays the kubelet for its own namespace's pods
    _tenant: AsyncClient | None = None  # as a user of the victims' namespace
    _self: AsyncClient | None = None  # as a user of its own namespace
    _made: dict[str, Made] = field(default_factory=dict)  # attack name -> what it made
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)  # attempts and their holds
    _ending: asyncio.Event = field(default_factory=asyncio.Event)  # the run is over
    _tenancy_before: str = ""
    _driver: list[Any] = field(default_factory=list)

    async def start(self) -> None:
        """Its namespace, its identities (Kubernetes and Slurm), the plain node's driver."""
        self.own = await make_e2e_namespace(self.kube, f"soak-{self.seed}-adversary")
        self.kubelet = Kubelet(self.kube, self.own)
        self._tenancy_before = self.tenancy_file.read_text()
        tenancy = yaml.safe_load(self._tenancy_before) or {}
        tenancy.setdefault("namespaces", {})[self.own] = {"user": FORGER,
                                                          "account": FORGER_ACCOUNT}
        self.tenancy_file.write_text(yaml.safe_dump(tenancy))  # both processes re-read it
        self._tenant = await self._user(self.victims, own=False)
        self._self = await self._user(self.own, own=True)
        with contextlib.suppress(ApiError):
            await self.kube.delete(Node, PLAIN_NODE)  # left by an interrupted run
        await create_node(self.kube, PLAIN_NODE, cpu="8", memory="32Gi")
        self._driver = attacks.plain_node_driver(PLAIN_NODE)
        for obj in self._driver:
            with contextlib.suppress(ApiError):
                await self.kube.delete(type(obj), obj.metadata.name)
            await self.kube.create(obj)

    async def _user(self, namespace: str, *, own: bool) -> AsyncClient:
        config = await namespace_user(self.kube, self.cp, namespace,
                                      attacks.tenant_rules(own=own), name="adversary")
        return AsyncClient(KubeConfig.from_dict(config), trust_env=False)

    def tenants(self) -> dict[str, str]:
        """Namespace -> the Slurm user the tenancy maps it to (the victims': the bridge's)."""
        return {self.victims: self.slurm.user, self.own: FORGER}

    async def stop(self) -> None:
        """Everything it set up removed, the tenancy as before; each step whatever the others
        did."""
        steps: list[Awaitable[Any]] = [
            live.drop_namespace(self.kube, self.own) if self.own else asyncio.sleep(0),
            *(self.kube.delete(type(o), o.metadata.name) for o in reversed(self._driver)),
            self.kube.delete(Node, PLAIN_NODE),
        ]
        for step in steps:
            with contextlib.suppress(Exception):
                await step
        if self._tenancy_before:
            self.tenancy_file.write_text(self._tenancy_before)
        for client in (self._tenant, self._self):
            if client is not None:
                await client.close()

    # --- the schedule ---------------------------------------------------------------------

    async def run(self, schedule: list[Attack], load_start: float) -> None:
        """Each attack at its time, as a task of its own (an attempt may wait on the
        apiserver), which undoes what it made after its hold; returns once every attempt
        has its result (holds still running end in ``cleanup``)."""
        attempts = []
        for attack in schedule:
            delay = load_start + attack.at - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
            attempts.append(self._spawn(self._one(attack, load_start)))
        await asyncio.gather(*attempts, return_exceptions=True)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _one(self, attack: Attack, load_start: float) -> None:
        started = time.time() - load_start
        result, detail = await self._try(attack)
        attempt = Attempt(attack, started, result, detail)
        self.attempts.append(attempt)
        print(f"  attack {attempt.describe()}", flush=True)
        if attack.name in self._made:
            self._spawn(self._hold(attack, attempt))

    async def _hold(self, attack: Attack, attempt: Attempt) -> None:
        """Keep what the attempt made for its hold, or until the run ends, then undo it."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ending.wait(), attack.hold)
        await self._undo(attack.name, attempt)

    async def _try(self, attack: Attack) -> tuple[Result, str]:
        handlers: dict[int, Callable[[Attack], Awaitable[str]]] = {
            1: self._rank_taken, 2: self._mixed_group, 3: self._forge, 4: self._label_claim,
            5: self._foreign_pod, 6: self._debug_container,
        }
        return await attempt(lambda: handlers[attack.case](attack))

    async def _undo(self, name: str, attempt: Attempt | None) -> None:
        made = self._made.pop(name, None)
        if made is None:
            return
        if attempt is not None:
            attempt.aftermath = made.describe(self.last())
            print(f"  attack {name} undone; before: {attempt.aftermath}", flush=True)
        clients = {self.victims: self._tenant, self.own: self._self}
        for ns, pod in made.pods:
            with contextlib.suppress(Exception):
                await (clients[ns] or self.kube).delete(Pod, pod, namespace=ns)
        for ns, claim in made.claims:
            with contextlib.suppress(Exception):
                await (self._self or self.kube).delete(ResourceClaim, claim, namespace=ns)
        for job_id in made.jobs:
            with contextlib.suppress(Exception):
                await self._still_its_own(job_id, f"k8s:{self.own}/{name}")
                await asyncio.to_thread(self._as_forger, "scancel", job_id)

    async def _still_its_own(self, job_id: str, job_name: str) -> None:
        """The forged job ends only when its user cancels it: the harness never touches it
        (its faults cancel the load's placeholders), so CANCELLED now is the bridge's doing."""
        state = (await asyncio.to_thread(self.slurm.admin, "squeue", "-h", "-t", "all", "-j",
                                         job_id, "-o", "%T", check=False)).strip()
        if state == "CANCELLED":
            self.violation(FOREIGN_CANCEL, f"job {job_id} ({job_name}, Slurm user {FORGER}) "
                           "was cancelled before its user cancelled it")

    async def cleanup(self) -> None:
        """The end of the run: every attempt's objects undone now (holds end at once)."""
        self._ending.set()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        by_name = {a.attack.name: a for a in self.attempts}
        for name in list(self._made):
            await self._undo(name, by_name.get(name))

    # --- the cases --------------------------------------------------------------------------

    def _snap(self) -> Snapshot:
        snap = self.last()
        if snap is None:
            raise NoVictim("no snapshot yet")
        return snap

    def _record(self, attack: Attack) -> Made:
        return self._made.setdefault(attack.name, Made())

    async def _create(self, attack: Attack, client: AsyncClient | None, ns: str,
                      pod: Pod) -> None:
        assert client is not None and pod.metadata is not None and pod.metadata.name
        made = self._record(attack)
        if (ns, pod.metadata.name) in made.pods:
            return  # a retry after the API came back
        await create_pod(client, ns, pod)
        made.pods.append((ns, pod.metadata.name))

    async def _rank_taken(self, attack: Attack) -> str:
        snap = self._snap()
        if attack.variant == 0:
            found = attacks.placed_group(snap, attack.pick)
            if found is None:
                raise NoVictim("no group of another tenant placed")
            group, members = found
            gpus = max(m.gpus_asked for m in members)
            pod = attacks.rank_taken_pod(attack.name, group, len(members), gpus)
            victim = (f"group {group} ({len(members)} members on "
                      f"{sorted(m.slurm_node for m in members)}, {gpus} GPUs each)")
        else:
            job = attacks.gang_job(snap, attack.pick)
            if job is None:
                raise NoVictim("no gang Job of another tenant running")
            assert self._tenant is not None
            found_job = await self._tenant.get(Job, job, namespace=self.victims)
            assert found_job.metadata is not None and found_job.metadata.uid
            pod = attacks.owner_ref_pod(attack.name, job, found_job.metadata.uid)
            victim = f"gang Job {job} (index 0)"
        await self._create(attack, self._tenant, self.victims, pod)
        return f"pod {attack.name} created in {self.victims}, naming {victim}"

    async def _mixed_group(self, attack: Attack) -> str:
        """Members one by one, the launcher first; a refused member ends the attempt (the
        aftermath tells which members were made)."""
        told = []
        for pod in attacks.mixed_group(attack.name):
            assert pod.metadata is not None
            await self._create(attack, self._tenant, self.victims, pod)
            told.append(pod.metadata.name)
            await asyncio.sleep(1)
        return f"group {attack.name} created launcher first: {told}"

    def _as_forger(self, *argv: str) -> str:
        try:
            return self.slurm.admin("runuser", "-u", FORGER, "--", *argv, timeout=30)
        except AssertionError as exc:
            if any(words in str(exc) for words in SLURM_AWAY):
                raise Away(str(exc)) from exc
            raise

    async def _forge(self, attack: Attack) -> str:
        found = attacks.forge_victim(self._snap(), attack.variant, attack.pick)
        if found is None:
            raise NoVictim("no workload of another tenant to forge an owner for")
        owner, nodes, gpus = found
        name = f"k8s:{self.own}/{attack.name}"
        try:
            out = await asyncio.to_thread(
                self._as_forger, *attacks.forged_sbatch(name, owner, nodes, gpus))
        except AssertionError as exc:
            raise Refused(f"Slurm: {str(exc)[:400]}") from exc
        job_id = out.strip().split(";")[0]
        self._record(attack).jobs.append(job_id)
        return (f"job {job_id} {name} submitted as Slurm user {FORGER} (mapped to {self.own}), "
                f"comment owner {owner}, {nodes} nodes, {gpus} GPUs each")

    async def _label_claim(self, attack: Attack) -> str:
        claim, made = f"{attack.name}-claim", self._record(attack)
        assert self._self is not None
        if (self.own, claim) not in made.claims:
            await self._self.create(attacks.own_claim(claim, self.own))
            made.claims.append((self.own, claim))
        await self._create(attack, self._self, self.own, attacks.claimed_pod(attack.name, claim))
        try:
            devices = await self._running_with(attack.name, claim)
        except TimeoutError as exc:
            raise NotDone(f"kube-scheduler did not allocate claim {claim}: {exc}") from exc
        ended = attacks.ended_job(self._snap())
        job_id = ended.job_id if ended else "1"
        await self._self.patch(ResourceClaim, claim, {"metadata": {"labels": {
            keys.CLAIM_JOB_LABEL: job_id}}}, namespace=self.own, patch_type=PatchType.MERGE)
        return (f"claim {claim} allocated {devices} by kube-scheduler to pod {attack.name} "
                f"(running), then labelled {keys.CLAIM_JOB_LABEL}={job_id} "
                f"({ended.name + ' ' + ended.state if ended else 'no ended job listed'})")

    async def _running_with(self, pod: str, claim: str, timeout: float = 45) -> list[str]:  # noqa: ASYNC109
        """The claim's devices once kube-scheduler allocated it and the pod runs."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = await self.kube.get(Pod, pod, namespace=self.own)
            got = await self.kube.get(ResourceClaim, claim, namespace=self.own)
            allocation = got.status.allocation if got.status else None
            results = (allocation.devices.results if allocation and allocation.devices
                       else None) or []
            if results and found.status and found.status.phase == "Running":
                return [f"{r.pool}/{r.device}" for r in results]
            await asyncio.sleep(1)
        raise TimeoutError(f"pod {pod} not running with claim {claim} in {timeout:.0f}s")

    async def _foreign_pod(self, attack: Attack) -> str:
        node = attacks.busy_node(self._snap(), self.kube_nodes, attack.pick)
        assert node is not None
        await self._create(attack, self._self, self.own,
                           attacks.foreign_pod(attack.name, attack.variant, node))
        where = f"spec.nodeName {node}" if attack.variant == 0 else "placed by kube-scheduler"
        return f"pod {attack.name} created in {self.own} ({where}), NVIDIA_VISIBLE_DEVICES=all"

    async def _debug_container(self, attack: Attack) -> str:
        victim = attacks.debug_victim(self._snap(), attack.pick)
        if victim is None:
            raise NoVictim("no running bridge pod of another tenant")
        assert self._tenant is not None
        container = f"{attack.name}-debug"
        await self._tenant.patch(Pod.Ephemeralcontainers, victim.name,
                                 attacks.debug_patch(container), namespace=self.victims,
                                 patch_type=PatchType.STRATEGIC)
        return (f"ephemeral container {container} added to {victim.name} (job {victim.job_id} "
                f"on {victim.slurm_node}, GPUs {list(victim.gpu_ids)})")

    # --- the report -------------------------------------------------------------------------

    def figures(self, violations: list[Violation]) -> list[Figure]:
        """Per case: attempts admitted and refused; skipped or failed ones; the violations
        whose objects are a case's."""
        results = Counter((a.attack.case, a.result) for a in self.attempts)
        figures = []
        for case, (what, _) in CASES.items():
            for result in (Result.ADMITTED, Result.REFUSED):
                figures.append(Figure(f"case {case} ({what}): attempts {result.value}",
                                      "attempts", [float(results[(case, result)])]))
        other = sum(n for (_, result), n in results.items()
                    if result in (Result.SKIPPED, Result.FAILED))
        figures.append(Figure("attempts skipped (no victim) or failed (API or Slurm away)",
                              "attempts", [float(other)]))
        by_case = attacks.cases_of(violations)
        figures += [Figure(f"violations naming case {case}'s objects", "violations",
                           [float(by_case[case])]) for case in CASES]
        return figures

    def notes(self) -> list[str]:
        return [
            f"The adversarial tenant: namespace {self.own} (its pods and claims; mapped to Slurm "
            f"user {FORGER} in the tenancy), a user of {self.victims} (pods, "
            "pods/ephemeralcontainers), a plain Node with a DRA driver's slice for case 4; "
            "one attempt every 20-35 s, the six cases in a seeded order each round, each "
            "undone 60-120 s later.",
            *(f"attempt {a.describe()}" for a in self.attempts[:80]),
        ]

