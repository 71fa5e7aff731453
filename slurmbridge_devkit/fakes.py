"""In-memory FAKES of Slurm and of the apiserver, for unit tests and offline benchmarks.

``FakeSlurm`` implements ``bridge.ports.SlurmPort`` and ``FakeKube`` implements
``bridge.ports.KubePort``; they keep state in dicts and answer at once.  They are fakes:
what they do is what the bridge relies on (Slurm's job and node states, the apiserver's
resourceVersion preconditions, 404 and 409, a Binding's annotations, a watch of pods), not
a model of either system.  Anything that must hold against the real ones is checked by the
integration and e2e tests.
"""

import asyncio
import contextlib
import copy
import dataclasses
import itertools
import uuid
from collections import Counter
from collections.abc import AsyncIterable, AsyncIterator, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import jsonpatch
from lightkube.core.exceptions import ApiError
from lightkube.core.resource import Resource
from lightkube.models.meta_v1 import Status
from lightkube.operators import UnaryOperator
from lightkube.resources.core_v1 import Node, Pod
from lightkube.resources.resource_v1 import ResourceClaim, ResourceClaimStatus
from lightkube.types import PatchType

from bridge.config import Settings
from bridge.jobs.request import JobRequest
from bridge.runtime import Bridge
from bridge.slurm.errors import SlurmJobNotFound, SlurmRejected, SlurmUnavailable
from bridge.slurm.types import Accounting, Allocation, JobState, SlurmJob, SlurmNode
from slurmbridge_cli.compose import build_bridge

Obj = dict[str, Any]
_SUBRESOURCES: dict[Any, type[Resource]] = {
    Pod.Status: Pod, Node.Status: Node, ResourceClaimStatus: ResourceClaim,
}


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
            user=req.placement.user or "", account=req.placement.account or "",
            qos=req.placement.qos or "",
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
        self._check_up()
        self.requests["list_nodes"] += 1
        return list(self.nodes.values())

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


def api_error(code: int, message: str) -> ApiError:
    """An ``ApiError`` as lightkube raises it for an apiserver answer of ``code``."""
    return ApiError(status=Status(code=code, status="Failure", message=message))


class FakeKube:
    """A fake apiserver holding Pods, Nodes, Leases and Events as dicts.

    Every write bumps the object's resourceVersion; a write carrying an older one fails
    with 409, a JSON Patch whose ``test`` fails with 422, a missing object with 404.  A
    Binding sets ``spec.nodeName`` and copies its annotations (UID precondition: 409 for a
    recreated pod); an Eviction marks the pod deleted (``deletionTimestamp``), as the
    apiserver does until the kubelet has stopped it.
    ``down = True`` makes every call fail as an unreachable apiserver would.
    """

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], Obj] = {}  # (kind, namespace, name) -> object
        self.evicted: list[str] = []  # "namespace/name" of pods evicted, in order
        # Every create, patch, replace and delete, failed ones included: (verb, kind, body).
        self.written: list[tuple[str, str, Obj]] = []
        self.down = False
        self._versions = itertools.count(1)
        self._version = 0  # the latest resourceVersion given out
        self._watchers: list[asyncio.Queue[tuple[str, Obj]]] = []
        self.lists: Counter[str] = Counter()  # LIST requests by kind

    # -- what a test arranges and reads ----------------------------------------------------

    def add(self, obj: Resource) -> None:
        """Put an object in as if someone had created it (a uid and resourceVersion given)."""
        self._store(_kind(type(obj)), cast(Any, obj).to_dict(), "ADDED")

    def obj(self, res: type[Resource], name: str, namespace: str = "") -> Obj | None:
        """The stored object as a dict (None: there is none)."""
        return self.objects.get((_kind(res), namespace, name))

    def events(self, reason: str | None = None) -> list[Obj]:
        """Events recorded (optionally only those with ``reason``), oldest first."""
        return [o for (kind, _, _), o in self.objects.items()
                if kind == "Event" and reason in (None, o.get("reason"))]

    # -- KubePort --------------------------------------------------------------------------

    async def get(self, res: Any, name: str, *, namespace: str | None = None) -> Any:
        await self._io()
        return res.from_dict(copy.deepcopy(self._existing(res, name, namespace)))

    def list(self, res: Any, *, namespace: str | None = None, labels: Any = None,
             fields: Any = None) -> AsyncIterable[Any]:
        self._check_up()
        self.lists[_kind(res)] += 1
        found = [copy.deepcopy(o) for (kind, ns, _), o in self.objects.items()
                 if kind == _kind(res) and namespace in (None, "*", ns)
                 and _selected(o, labels, fields)]
        return _Listing([res.from_dict(o) for o in found], str(self._version))

    async def watch(self, res: Any, *, namespace: str | None = None, labels: Any = None,
                    fields: Any = None, resource_version: str | None = None,
                    ) -> AsyncIterator[tuple[str, Any]]:
        """Existing objects as ADDED (with ``resource_version``: those written after it, as
        MODIFIED; the fake keeps no history of deletions), then changes; an object leaving
        the selection is DELETED (as a pod bound away from ``spec.nodeName=`` is)."""
        queue: asyncio.Queue[tuple[str, Obj]] = asyncio.Queue()
        self._watchers.append(queue)
        after = int(resource_version) if resource_version else None
        try:
            async for pod in self.list(res, namespace=namespace, labels=labels, fields=fields):
                if after is None:
                    yield "ADDED", pod
                elif int(pod.metadata.resourceVersion) > after:
                    yield "MODIFIED", pod
            while True:
                event, obj = await queue.get()
                self._check_up()
                if obj.get("kind") != _kind(res):
                    continue
                if event != "DELETED" and not _selected(obj, labels, fields):
                    event = "DELETED"
                yield event, res.from_dict(copy.deepcopy(obj))
        finally:
            self._watchers.remove(queue)

    async def patch(self, res: Any, name: str, obj: Any, *, namespace: str | None = None,
                    patch_type: PatchType = PatchType.STRATEGIC) -> Any:
        await self._io(("patch", _kind(res), copy.deepcopy(obj)))
        target = _SUBRESOURCES.get(res, res)
        current = copy.deepcopy(self._existing(target, name, namespace))
        if patch_type is PatchType.JSON:
            try:
                current = jsonpatch.apply_patch(current, obj)
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
                raise api_error(422, f"{name}: {exc}") from exc
            return target.from_dict(self._store(_kind(target), current, "MODIFIED"))
        wanted = (obj.get("metadata") or {}).get("resourceVersion")
        if wanted is not None and wanted != current["metadata"].get("resourceVersion"):
            raise api_error(409, f"{name}: the object has been modified")
        _merge(current, obj, strategic=patch_type is PatchType.STRATEGIC)
        return target.from_dict(self._store(_kind(target), current, "MODIFIED"))

    async def create(self, obj: Any, name: str | None = None, *,
                     namespace: str | None = None) -> Any:
        await self._io(("create", _kind(type(obj)), obj.to_dict()))
        if isinstance(obj, Pod.Binding):
            return self._bind(obj)
        if isinstance(obj, Pod.Eviction):  # the pod is deleted: it stays until it stopped
            pod = copy.deepcopy(self._existing(Pod, name or "", namespace))
            pod["metadata"]["deletionTimestamp"] = _now()
            self._store("Pod", pod, "MODIFIED")
            self.evicted.append(f"{namespace}/{name}")
            return obj
        raw = obj.to_dict()
        meta = raw.setdefault("metadata", {})
        if not meta.get("name"):
            meta["name"] = f"{meta.get('generateName', '')}{next(self._versions)}"
        if (_kind(type(obj)), meta.get("namespace") or "", meta["name"]) in self.objects:
            raise api_error(409, f"{meta['name']} already exists")
        return type(obj).from_dict(self._store(_kind(type(obj)), raw, "ADDED"))

    async def replace(self, obj: Any) -> Any:
        await self._io(("replace", _kind(type(obj)), obj.to_dict()))
        raw = obj.to_dict()
        meta = raw["metadata"]
        current = self._existing(type(obj), meta["name"], meta.get("namespace"))
        if meta.get("resourceVersion") != current["metadata"].get("resourceVersion"):
            raise api_error(409, f"{meta['name']}: the object has been modified")
        return type(obj).from_dict(self._store(_kind(type(obj)), raw, "MODIFIED"))

    async def delete(self, res: Any, name: str, *, namespace: str | None = None) -> None:
        await self._io(("delete", _kind(res), {"metadata": {"name": name, "namespace": namespace}}))
        self._existing(res, name, namespace)
        gone = self.objects.pop((_kind(res), namespace or "", name))
        self._notify("DELETED", gone)

    # -- inside ----------------------------------------------------------------------------

    def _check_up(self) -> None:
        if self.down:
            raise ConnectionError("fake apiserver is down")

    @property
    def writes(self) -> int:
        return len(self.written)

    @property
    def watches_open(self) -> int:
        return len(self._watchers)

    async def _io(self, write: tuple[str, str, Obj] | None = None) -> None:
        """A request: other tasks run meanwhile (as during a real round trip)."""
        if write is not None:
            self.written.append(write)
        await asyncio.sleep(0)
        self._check_up()

    def _existing(self, res: Any, name: str, namespace: str | None) -> Obj:
        self._check_up()
        found = self.objects.get((_kind(res), namespace or "", name))
        if found is None:
            raise api_error(404, f"{_kind(res).lower()} {name!r} not found")
        return found

    def _store(self, kind: str, raw: Obj, event: str) -> Obj:
        meta = raw.setdefault("metadata", {})
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", _now())
        self._version = next(self._versions)
        meta["resourceVersion"] = str(self._version)
        raw["kind"] = kind
        self.objects[(kind, meta.get("namespace") or "", meta["name"])] = raw
        self._notify(event, raw)
        return copy.deepcopy(raw)

    def _notify(self, event: str, raw: Obj) -> None:
        for queue in self._watchers:
            queue.put_nowait((event, copy.deepcopy(raw)))

    def _bind(self, binding: Any) -> Any:
        meta = binding.metadata
        pod = copy.deepcopy(self._existing(Pod, meta.name, meta.namespace))
        if meta.uid and meta.uid != pod["metadata"]["uid"]:
            raise api_error(409, f"Precondition failed: UID in precondition: {meta.uid}")
        if pod.get("spec", {}).get("nodeName"):
            raise api_error(409, f"pod {meta.name} is already assigned to a node")
        pod["spec"]["nodeName"] = binding.target.name
        pod["metadata"].setdefault("annotations", {}).update(meta.annotations or {})
        self._store("Pod", pod, "MODIFIED")
        return binding


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _kind(res: Any) -> str:
    return cast(str, res.__name__)  # Pod, Node, Lease, Event: lightkube names them as the API


class _Listing:
    """A list answer: the items, and the resourceVersion it was taken at (as lightkube's)."""

    def __init__(self, items: list[Any], version: str) -> None:
        self._items = items
        self.resourceVersion = version

    async def __aiter__(self) -> AsyncIterator[Any]:
        for item in self._items:
            yield item


def _selected(raw: Obj, labels: Any, fields: Any) -> bool:
    """Equality (and ``operators.exists()``) label selectors, equality field selectors
    (``{"spec.nodeName": ""}``: no node)."""
    have = (raw.get("metadata") or {}).get("labels") or {}
    for key, wanted in (labels or {}).items():
        exists = isinstance(wanted, UnaryOperator) and wanted.op_name == "exists"
        if (key not in have) if exists else have.get(key) != wanted:
            return False
    for path, value in (fields or {}).items():
        node: Any = raw
        for part in path.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if (node or "") != value:
            return False
    return True


def _merge(target: Obj, patch: Obj, *, strategic: bool) -> None:
    """JSON merge patch (None deletes); a strategic patch merges ``conditions`` by type."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value, strategic=strategic)
        elif strategic and key == "conditions" and isinstance(target.get(key), list):
            kept = [c for c in target[key] if c.get("type") not in {v["type"] for v in value}]
            target[key] = kept + copy.deepcopy(value)
        else:
            target[key] = copy.deepcopy(value)


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
    device_classes: dict[str, Any] | None = None,
) -> Bridge:
    """The bridge as ``slurmbridge extender`` wires it, over the fakes.  Namespace ``ns``
    is mapped to Slurm account research and user alice; a job's status is shown on its pod
    after 0.1 s (not 10: a test drains the notifier when it ends)."""
    (workdir / "tenancy.yaml").write_text(tenancy)
    settings = Settings.model_validate({
        "admission": {"tenancy_file": workdir / "tenancy.yaml"},
        "controllers": {"identity": identity},
        "placement": {"notify_quiet_seconds": 0.1, **(placement or {})},
        "device_classes": device_classes or {},
    })
    return build_bridge(settings, slurm=slurm, kube=kube)
