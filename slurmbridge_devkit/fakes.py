"""In-memory FAKES of Slurm and of the apiserver, for unit tests and offline benchmarks.

``FakeSlurm`` implements ``bridge.ports.SlurmPort`` and ``FakeKube`` (fake_kube.py) implements
``bridge.ports.BridgeKubePort``; they keep state in dicts and answer at once.  They are fakes:
what they do is what the bridge relies on (Slurm's job and node states, the apiserver's
resourceVersion preconditions, 404 and 409, a Binding's annotations, a watch of pods), not
a model of either system.  Anything that must hold against the real ones is checked by the
integration and e2e tests.
"""

import asyncio
import contextlib
import dataclasses
import itertools
from collections import Counter
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

from bridge.config import Settings
from bridge.jobs.request import JobRequest
from bridge.runtime import Bridge
from bridge.slurm.errors import SlurmJobNotFound, SlurmRejected, SlurmUnavailable
from bridge.slurm.types import (
    Accounting,
    Allocation,
    JobState,
    NodeTable,
    SlurmJob,
    SlurmNode,
)
from slurmbridge_cli.compose import build_bridge
from slurmbridge_devkit.fake_kube import FakeKube

FAKE_SLURM_URL = "http://slurmrestd.fake:6820"  # named in fake_settings; no fake calls it


class InFlight:
    """Stands in for an async method: each call held ``hold`` seconds, then passed on, and
    the most calls under way at once recorded (``most``), for tests that bound them."""

    def __init__(self, method: Any, hold: float = 0.01) -> None:
        self._method = method
        self._hold = hold
        self._now = 0
        self.most = 0

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self._now += 1
        self.most = max(self.most, self._now)
        try:
            await asyncio.sleep(self._hold)
            return await self._method(*args, **kwargs)
        finally:
            self._now -= 1


class FakeSlurm:
    """A fake slurmctld: jobs and nodes in dicts; tests move jobs on with ``start``/``end``."""

    # The Slurm user its jobs of the bridge's own user show (JobBuilder's default too): what a
    # bridge over it has as ``slurm.user``, so it believes their owners (placement/trust.py).
    BRIDGE_USER = ""

    def __init__(self, nodes: tuple[str, ...] = (), *, first_id: int = 100) -> None:
        self.jobs: dict[int, SlurmJob] = {}
        self.nodes: dict[str, SlurmNode] = {n: idle_node(n) for n in nodes}
        self.submitted: list[JobRequest] = []
        self.cancelled: list[int] = []
        self.down = False  # True: every call fails as an unreachable slurmrestd would
        self.requests: Counter[str] = Counter()  # calls per SlurmPort operation
        self.states_returned = 0  # job states answered by ``job_states``, summed (bytes' proxy)
        self.node_confs: list[str] = []  # every add_node asked
        self.refuse_nodes = ""  # non-empty: add_node fails with this error, as Slurm's
        self._ids = itertools.count(first_id)
        self._tables: list[tuple[SlurmNode, ...]] = []  # each node table answered, by read_at

    def _check_up(self) -> None:
        if self.down:
            raise SlurmUnavailable("fake slurmrestd is down")

    # -- what a test arranges --------------------------------------------------------------

    def start(self, job_id: int, *nodes: str, gpus: tuple[int, ...] = ()) -> SlurmJob:
        """Slurm allocates the job: RUNNING on ``nodes`` with ``gpus`` on each."""
        job = self.jobs[job_id]
        allocation = Allocation(tuple(nodes), {n: gpus for n in nodes} if gpus else {})
        return self.put(
            dataclasses.replace(job, state=JobState.RUNNING, reason="None", allocation=allocation)
        )

    def start_components(
        self, job_id: int, *parts: tuple[tuple[str, ...], tuple[int, ...]]
    ) -> SlurmJob:
        """Slurm allocates a heterogeneous job: each component (nodes, GPUs on each of them)
        in offset order, as the client folds the components' records."""
        allocation = Allocation(
            tuple(n for nodes, _ in parts for n in nodes),
            {n: gpus for nodes, gpus in parts if gpus for n in nodes},
            components=tuple(nodes for nodes, _ in parts),
        )
        return self.put(dataclasses.replace(
            self.jobs[job_id], state=JobState.RUNNING, reason="None", allocation=allocation))

    def end(self, job_id: int, state: JobState = JobState.COMPLETED, reason: str = "None") -> None:
        self.put(dataclasses.replace(self.jobs[job_id], state=state, reason=reason))

    def put(self, job: SlurmJob) -> SlurmJob:
        self.jobs[job.job_id] = job
        return job

    # -- SlurmPort -------------------------------------------------------------------------

    async def submit(self, req: JobRequest) -> int:
        self._check_up()
        job_id = next(self._ids)
        self.submitted.append(req)
        self.jobs[job_id] = SlurmJob(
            job_id, req.name, JobState.PENDING, "Priority", req.owner, None,
            user=req.placement.user or self.BRIDGE_USER, account=req.placement.account or "",
            qos=req.placement.qos or "", het_components=len(req.components),
        )
        return job_id

    async def get_job(self, job_id: int) -> SlurmJob:
        self._check_up()
        self.requests["get_job"] += 1
        if job_id not in self.jobs:
            raise SlurmJobNotFound(job_id)
        return self.jobs[job_id]

    async def job_allocation(self, job_id: int) -> Allocation | None:
        """As slurmrestd v0.0.44+: a running job's allocation alone, else None."""
        self._check_up()
        self.requests["job_allocation"] += 1
        if job_id not in self.jobs:
            raise SlurmJobNotFound(job_id)
        job = self.jobs[job_id]
        return job.allocation if job.state is JobState.RUNNING else None

    async def list_jobs(self, *, every_allocation: bool = False) -> list[SlurmJob]:
        """Every job, as an admin's ``GET /jobs/`` (``slurmbridge status``, ``gpus``,
        ``uninstall``); a test's jobs carry their allocations already."""
        self._check_up()
        self.requests["list_jobs"] += 1
        return list(self.jobs.values())

    async def job_states(self, ids: Iterable[int]) -> dict[int, JobState]:
        self._check_up()
        self.requests["job_states"] += 1
        states = {i: self.jobs[i].state for i in set(ids) if i in self.jobs}
        self.states_returned += len(states)
        return states

    async def every_job_state(self) -> dict[int, JobState | None]:
        self._check_up()
        self.requests["every_job_state"] += 1
        return {i: j.state for i, j in self.jobs.items()}

    async def ping(self) -> None:
        self._check_up()
        self.requests["ping"] += 1

    async def cancel(self, job_id: int) -> None:
        self._check_up()
        self.cancelled.append(job_id)
        job = self.jobs.get(job_id)
        if job is not None and job.state.is_live:
            self.jobs[job_id] = dataclasses.replace(job, state=JobState.CANCELLED)

    async def list_nodes(self) -> list[SlurmNode]:
        return list((await self.node_table()).nodes)

    async def node_table(self) -> NodeTable:
        """Its ``read_at`` counts tables, as slurmctld's clock would move between them."""
        self._check_up()
        self.requests["list_nodes"] += 1
        self._tables.append(tuple(self.nodes.values()))
        return NodeTable(self._tables[-1], len(self._tables) - 1)

    async def node_table_since(self, read_at: int) -> NodeTable | None:
        """None while the nodes are those of the table read at ``read_at`` (Slurm's 304)."""
        self._check_up()
        if tuple(self.nodes.values()) == self._tables[read_at]:
            self.requests["nodes_unchanged"] += 1
            return None
        return await self.node_table()

    async def drain(self, node: str, reason: str) -> None:
        self._check_up()
        n = self.nodes[node]
        self.nodes[node] = dataclasses.replace(n, states=n.states | {"DRAIN"}, reason=reason)

    async def resume(self, node: str) -> None:
        self._check_up()
        n = self.nodes[node]
        self.nodes[node] = dataclasses.replace(n, states=n.states - {"DRAIN"}, reason="")

    async def add_node(self, node_conf: str) -> None:
        """Like slurmctld: a NodeName= line becomes a dynamic node (IDLE, its features)."""
        self._check_up()
        self.node_confs.append(node_conf)
        if self.refuse_nodes:
            raise SlurmRejected("add_node", [self.refuse_nodes], 200)
        fields = dict(part.split("=", 1) for part in node_conf.split())
        states = {"IDLE", "DYNAMIC_NORM"} | ({"EXTERNAL"} if fields.get("State") == "EXTERNAL"
                                           else set())
        self.nodes[fields["NodeName"]] = SlurmNode(
            fields["NodeName"], frozenset(states), "", int(fields.get("CPUs", "1")),
            int(fields.get("RealMemory", "0")), fields.get("Gres", ""),
            features=frozenset(fields.get("Features", "").split(",")) - {""},
        )

    async def delete_node(self, node: str) -> None:
        self._check_up()
        if self.nodes[node].states & {"ALLOCATED", "MIXED", "COMPLETING"}:
            raise SlurmRejected("delete_node", [f"Node {node} has jobs"], 200)
        del self.nodes[node]

    async def accounting(self) -> Accounting:
        self._check_up()
        return Accounting(frozenset(), frozenset(), {})

    async def aclose(self) -> None:
        return None


def idle_node(name: str, *states: str, reason: str = "") -> SlurmNode:
    """A Slurm node as ``scontrol show node`` would list it (IDLE unless ``states``)."""
    return SlurmNode(name, frozenset(states or {"IDLE"}), reason, cpus=8, memory_mb=16000,
                     gres="gpu:4")


@contextlib.asynccontextmanager
async def intake_running(bridge: Bridge) -> AsyncIterator[None]:
    """The pod cache and the leader's intake it feeds (with its releases) running over the
    fakes; stopped, and the notifier's writes drained, on the way out."""
    tasks = [asyncio.create_task(bridge.pod_cache.run()),
             asyncio.create_task(bridge.intake.run())]
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await bridge.notifier.drain()


TENANCY = "namespaces:\n  ns: {account: research, user: alice}\n"


def bridge_over_fakes(
    workdir: Path, slurm: FakeSlurm, kube: FakeKube, *, identity: str = "replica-a",
    tenancy: str = TENANCY, placement: dict[str, Any] | None = None,
    device_classes: dict[str, Any] | None = None, admission: dict[str, Any] | None = None,
) -> Bridge:
    """The bridge as ``slurmbridge extender`` wires it, over the fakes.  Namespace ``ns``
    is mapped to Slurm account research and user alice; a job's status is shown on its pod
    after 0.1 s (not 10: a test drains the notifier when it ends)."""
    (workdir / "tenancy.yaml").write_text(tenancy)
    settings = fake_settings(
        admission={"tenancy_file": workdir / "tenancy.yaml", **(admission or {})},
        controllers={"identity": identity},
        placement={"notify_quiet_seconds": 0.1, **(placement or {})},
        device_classes=device_classes or {},
    )
    return build_bridge(settings, slurm=slurm, kube=kube)


def fake_settings(**sections: Any) -> Settings:
    """Settings of a bridge over the fakes: ``sections`` as in a settings file, the required
    slurm.url, which no fake calls, and the Slurm user the fake shows for the bridge's jobs."""
    return Settings.model_validate(
        {"slurm": {"url": FAKE_SLURM_URL, "user": FakeSlurm.BRIDGE_USER}, **sections})
