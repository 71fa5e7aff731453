"""A pod's DRA claims written with the devices Slurm allocated, before kube-scheduler sees it.

Slurm allocates the GPUs; the claim names them as Kubernetes does: the device of the node's
ResourceSlices whose index attribute is Slurm's index (gres.conf order), one per GPU, in the
order of the pod's claims and their requests.  The write is what kube-scheduler's allocator
would write (results, class and claim configs, the node), with ``reservedFor`` the pod, so its
DRA plugin finds the claim allocated for that node, and the kubelet prepares those devices.
The claim carries the bridge's finalizer, the job's label and the record of what it wrote
(``marks.py``): the bridge, not the resource claim controller, frees it, once the job ended
and no pod uses it (``freeing.py``).  Anything
that would need a guess (a GPU without an index, a device the driver does not publish, a
count that does not add up) is an error naming it, and the pod is not released.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import structlog
from lightkube.core.exceptions import ApiError
from lightkube.models.core_v1 import Pod, PodResourceClaim
from lightkube.resources.core_v1 import Pod as PodResource
from lightkube.resources.resource_v1 import DeviceClass, ResourceClaim, ResourceSlice
from lightkube.resources.resource_v1 import ResourceClaimStatus as ClaimStatus
from lightkube.types import PatchType

from bridge.config import DeviceClassGres
from bridge.devices.asks import DeviceAsk, UnmappableClaim, claim_asks
from bridge.devices.freeing import ClaimReleaser
from bridge.devices.marks import DeviceId, PinRecord, allocated_devices, marks, version
from bridge.devices.slices import device_indices
from bridge.kube.apierrors import is_not_found
from bridge.ports import KubeGet, KubeList, KubePatch

log = structlog.get_logger(__name__)


class ClaimPinError(ValueError):
    """The pod's claims cannot name Slurm's GPUs; the message says which and why."""


class ClaimsNotReady(RuntimeError):
    """A claim the pod's template makes does not exist yet: try again shortly."""


@dataclass(frozen=True, slots=True)
class _Claim:
    claim: ResourceClaim
    label: str
    asks: list[DeviceAsk]


class PinningKube(KubeGet, KubeList, KubePatch, Protocol):
    """The pod, its claims, their classes and the node's slices read; the claims patched."""


class ClaimPinner:
    def __init__(
        self, kube: PinningKube, classes: Mapping[str, DeviceClassGres], releaser: ClaimReleaser
    ) -> None:
        self._kube = kube
        self._classes = classes
        self._releaser = releaser
        self._index_names = {c.index_attribute for c in classes.values()}

    async def pin(self, pod: Pod, job_id: int, kube_node: str, gpu_ids: tuple[int, ...]) -> None:
        """Write every claim of ``pod`` with the devices of ``gpu_ids`` on ``kube_node``;
        raises ClaimPinError, ClaimsNotReady."""
        refs = (pod.spec.resourceClaims if pod.spec else None) or []
        if not refs:
            return
        if any(not r.resourceClaimName and not _generated(pod, r.name) for r in refs):
            pod = await self._fresh(pod)  # the copy may predate the claims' creation
        claims = [await self._read(pod, ref) for ref in refs]
        asked = sum(a.count for c in claims for a in c.asks)
        if asked != len(gpu_ids):
            raise ClaimPinError(
                f"Slurm gave job {job_id} {len(gpu_ids)} GPU index(es) on {kube_node} "
                f"({list(gpu_ids)}) but the pod's claims ask for {asked}: a GPU declared in "
                "gres.conf without File= has no index; give each GPU its device file"
            )
        devices = await self._devices(kube_node, {self._driver(a) for c in claims for a in c.asks})
        indices = iter(gpu_ids)
        planned = [(c, [self._result(a, next(indices), devices, kube_node)
                        for a in c.asks for _ in range(a.count)]) for c in claims]
        mine = {DeviceId(r["driver"], r["pool"], r["device"]) for _, rs in planned for r in rs}
        with self._releaser.pinning():
            await self._releaser.free_stale(mine, job_id)
            for claim, results in planned:
                await self._write(claim, results, pod, job_id, kube_node)

    async def _fresh(self, pod: Pod) -> Pod:
        meta = pod.metadata
        assert meta is not None and meta.name
        return await self._kube.get(PodResource, meta.name, namespace=meta.namespace)

    def _driver(self, ask: DeviceAsk) -> str:
        return self._classes[ask.device_class].driver or ask.device_class

    async def _read(self, pod: Pod, ref: PodResourceClaim) -> _Claim:
        meta = pod.metadata
        assert meta is not None and meta.namespace
        name = ref.resourceClaimName or _generated(pod, ref.name)
        if name is None:
            raise ClaimsNotReady(f"the claim of spec.resourceClaims {ref.name!r} is not made yet")
        label = f"ResourceClaim {meta.namespace}/{name}"
        try:
            claim = await self._kube.get(ResourceClaim, name, namespace=meta.namespace)
        except ApiError as err:
            if is_not_found(err):
                raise ClaimsNotReady(f"{label} does not exist (yet)") from None
            raise
        try:
            asks = claim_asks(label, claim.spec, self._classes)
        except UnmappableClaim as err:
            raise ClaimPinError(str(err)) from None
        return _Claim(claim, label, asks)

    async def _devices(self, kube_node: str, drivers: set[str]) -> dict[tuple[str, int], DeviceId]:
        """(driver, index) → device, from the node's ResourceSlices (each pool's newest)."""
        slices = [s async for s in self._kube.list(
            ResourceSlice, fields={"spec.nodeName": kube_node}) if s.spec.driver in drivers]
        return {(device.driver, at.gpu): device
                for device, at in device_indices(slices, self._index_names).items()}

    def _result(
        self, ask: DeviceAsk, index: int, devices: Mapping[tuple[str, int], DeviceId], node: str
    ) -> dict[str, str]:
        driver = self._driver(ask)
        device = devices.get((driver, index))
        if device is None:
            attribute = self._classes[ask.device_class].index_attribute
            raise ClaimPinError(
                f"Slurm gave GPU index {index} on {node}, but no device of driver {driver} "
                f"there has {attribute}={index} in its ResourceSlices: the driver and "
                "gres.conf must describe the same GPUs"
            )
        return {"request": ask.request, "driver": driver, "pool": device.pool,
                "device": device.device}

    async def _write(
        self, claim: _Claim, results: list[dict[str, str]], pod: Pod, job_id: int, node: str
    ) -> None:
        meta, current = claim.claim.metadata, claim.claim
        assert meta is not None and meta.name and meta.namespace and pod.metadata
        wanted = {DeviceId(r["driver"], r["pool"], r["device"]) for r in results}
        if current.status and current.status.allocation:
            reserved = {r.uid for r in current.status.reservedFor or []}
            if allocated_devices(current) == wanted and pod.metadata.uid in reserved:
                return  # written by an earlier attempt
            raise ClaimPinError(f"{claim.label} is allocated already (to other devices or "
                                "another pod): give the pod a claim of its own")
        record = PinRecord(job=job_id, pod=pod.metadata.uid or "", devices=frozenset(wanted))
        marked = await self._kube.patch(
            ResourceClaim, meta.name, marks(claim.claim, record), namespace=meta.namespace,
            patch_type=PatchType.JSON)
        status = {"allocation": {
            "devices": {"results": results,
                        "config": await self._configs(claim)},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node]}]}]},
        }, "reservedFor": [{"resource": "pods", "name": pod.metadata.name,
                            "uid": pod.metadata.uid}]}
        await self._kube.patch(ClaimStatus, meta.name, [
            version(marked), {"op": "add", "path": "/status", "value": status},
        ], namespace=meta.namespace, patch_type=PatchType.JSON)
        log.info("claim.pinned", claim=claim.label, job_id=job_id, node=node,
                 devices=[r["device"] for r in results])

    async def _configs(self, claim: _Claim) -> list[dict[str, Any]]:
        """The class configs, then the claim's, as kube-scheduler's allocator copies them."""
        configs: list[dict[str, Any]] = []
        for device_class in sorted({a.device_class for a in claim.asks}):
            requests = [a.request for a in claim.asks if a.device_class == device_class]
            found = await self._kube.get(DeviceClass, device_class)
            configs += [{"source": "FromClass", "requests": requests,
                         "opaque": c.opaque.to_dict()}
                        for c in (found.spec.config if found.spec else None) or []
                        if c.opaque is not None]
        spec = claim.claim.spec
        for c in (spec.devices.config if spec and spec.devices else None) or []:
            if c.opaque is not None:
                configs.append({"source": "FromClaim", "requests": c.requests or [],
                                "opaque": c.opaque.to_dict()})
        return configs


def _generated(pod: Pod, pod_claim: str) -> str | None:
    """The claim kube-controller-manager made from the pod's template (in the pod's status)."""
    for status in (pod.status.resourceClaimStatuses if pod.status else None) or []:
        if status.name == pod_claim:
            return status.resourceClaimName
    return None
