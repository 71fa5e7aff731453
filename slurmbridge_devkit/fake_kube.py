"""The fake apiserver (``FakeKube``, implementing ``bridge.ports.BridgeKubePort``), for unit
tests and offline benchmarks: what the bridge relies on of the apiserver, not a model of it
(fakes.py says more)."""

import asyncio
import copy
import itertools
import uuid
from collections import Counter
from collections.abc import AsyncIterable, AsyncIterator
from datetime import UTC, datetime
from typing import Any, cast

import jsonpatch
from lightkube.core.resource import Resource
from lightkube.operators import UnaryOperator
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Event, Node, Pod
from lightkube.resources.resource_v1 import ResourceClaim, ResourceClaimStatus
from lightkube.types import PatchType

from bridge.kube.apierrors import api_error

__all__ = ["FakeKube", "api_error"]  # api_error: the tests raise it too

Obj = dict[str, Any]
JsonPatch = list[dict[str, Any]]
_SUBRESOURCES: dict[Any, type[Resource]] = {
    Pod.Status: Pod, Node.Status: Node, ResourceClaimStatus: ResourceClaim,
    Deployment.Scale: Deployment,
}


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

    # The per-pod writes (bridge.ports: bare in the real client) through the verbs above,
    # so they are written and refused alike, and a test wrapping ``patch`` or ``create``
    # sees them.

    async def patch_pod(self, namespace: str, name: str, ops: JsonPatch) -> None:
        await self.patch(Pod, name, ops, namespace=namespace, patch_type=PatchType.JSON)

    async def bind_pod(self, namespace: str, name: str, binding: dict[str, Any]) -> None:
        await self.create(Pod.Binding.from_dict(binding), name, namespace=namespace)

    async def create_event(self, namespace: str, event: dict[str, Any]) -> None:
        await self.create(Event.from_dict(event))

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
