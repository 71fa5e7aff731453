"""The GPUs a pod's DRA claims ask Slurm for, read at admission.

The claims and templates are read once, here: the webhook writes their sum as the pod's
``slurmbridge.io/gpus`` (and ``gpu-type``), the bridge asks Slurm for that, and when Slurm has
allocated, writes each claim's allocation to the devices of Slurm's GPU indices
(``bridge/devices/pinning.py``).  A claim another pod already uses is refused: a claim's
devices are on one node, and each pod of a group is on its own node.
"""

from collections.abc import Mapping
from typing import Any, cast

from lightkube.models.resource_v1 import ResourceClaimSpec
from lightkube.resources.resource_v1 import ResourceClaim, ResourceClaimTemplate

from admission.owners import Kind, OwnerReader, WorkloadLookupError
from admission.pod import PodResourceClaim, PodShape
from bridge.config import DeviceClassGres
from bridge.devices.asks import DeviceAsk, GpuTotal, UnmappableClaim, claim_asks, gpu_total

CLAIM = Kind("resource.k8s.io", "v1", "ResourceClaim", "resourceclaims")
CLAIM_TEMPLATE = Kind("resource.k8s.io", "v1", "ResourceClaimTemplate", "resourceclaimtemplates")


async def claimed_gpus(
    pod: PodShape, namespace: str, read: OwnerReader, classes: Mapping[str, DeviceClassGres]
) -> GpuTotal | None:
    """The Slurm GPU ask of all the pod's claims (None: it has none); raises UnmappableClaim
    (what Slurm cannot allocate), WorkloadLookupError (a claim that cannot be read now)."""
    refs = pod.spec.resource_claims or []
    asks: list[tuple[str, DeviceAsk]] = []
    for ref in refs:
        label, spec = await _claim_spec(ref, namespace, read)
        asks += [(label, ask) for ask in claim_asks(label, spec, classes)]
    return gpu_total(asks, classes) if refs else None


async def _claim_spec(
    ref: PodResourceClaim, namespace: str, read: OwnerReader
) -> tuple[str, ResourceClaimSpec | None]:
    if ref.resource_claim_name:
        kind, name = CLAIM, ref.resource_claim_name
    elif ref.resource_claim_template_name:
        kind, name = CLAIM_TEMPLATE, ref.resource_claim_template_name
    else:
        raise UnmappableClaim(f"spec.resourceClaims {ref.name!r} names no claim and no template")
    label = f"{kind.kind} {namespace}/{name}"
    try:
        found = await read(kind, namespace, name)
    except Exception as err:  # unreachable, RBAC: never admit a pod whose GPUs are unknown
        raise WorkloadLookupError(f"cannot read {label} for the pod's GPUs: {err}") from err
    if found is None:
        raise UnmappableClaim(
            f"{label} (spec.resourceClaims {ref.name!r}) does not exist: create it first"
        )
    if kind is CLAIM_TEMPLATE:
        template = cast(ResourceClaimTemplate, ResourceClaimTemplate.from_dict(found))
        return label, template.spec.spec if template.spec else None
    claim = cast(ResourceClaim, ResourceClaim.from_dict(found))
    _unused(label, found)
    return label, claim.spec


def _unused(label: str, claim: dict[str, Any]) -> None:
    """A claim in use or allocated already is on a node of someone else's choosing."""
    status = claim.get("status") or {}
    users = [f"{r.get('resource')}/{r.get('name')}" for r in status.get("reservedFor") or []]
    if users or status.get("allocation"):
        held = f"in use by {', '.join(users)}" if users else "allocated already"
        raise UnmappableClaim(
            f"{label} is {held}: Slurm allocates a claim's devices on the node it gives one "
            "pod; give each pod its own claim (a ResourceClaimTemplate makes one per pod)"
        )
