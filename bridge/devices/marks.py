"""What proves that the bridge wrote a DRA claim's allocation: its marks, written at pin time.

A namespace user may write their own claims' metadata (labels, annotations, finalizers: the
``edit`` role), never their status: ``resourceclaims/status`` is kube-scheduler's, the resource
claim controller's and the bridge's.  A claim is the bridge's to free only when both hold:

- it carries the bridge's finalizer and its record (annotation ``slurmbridge.io/pinned-
  allocation``: the job, the pod and the devices written), which the chart's admission policy
  (``<cluster>-claims``, templates/admission-policy.yaml) lets no one but the bridge's service
  account add, change or remove, cluster admins included;
- the allocation on it is still the recorded one: those devices, reserved for that pod or no
  one (the resource claim controller drops gone pods).  One written after the bridge's (a free
  cut short, then kube-scheduler for another pod) is someone else's and stays.

The job label, which anyone may set, only narrows the listing: never a reason to free.
"""

from typing import Any, NamedTuple

from lightkube.resources.resource_v1 import ResourceClaim
from pydantic import BaseModel, ConfigDict, ValidationError

from bridge import keys
from bridge.link.gate import escaped


class DeviceId(NamedTuple):
    driver: str
    pool: str
    device: str


class PinRecord(BaseModel):
    """The bridge's record of what it wrote on a claim (the annotation's JSON)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    job: int
    pod: str  # the UID of the pod the allocation was reserved for
    devices: frozenset[DeviceId]


def allocated_devices(claim: ResourceClaim) -> set[DeviceId]:
    allocation = claim.status.allocation if claim.status else None
    results = (allocation.devices.results if allocation and allocation.devices else None) or []
    return {DeviceId(r.driver, r.pool, r.device) for r in results}


def record_of(claim: ResourceClaim) -> PinRecord | None:
    """The bridge's record, if the claim carries it with the finalizer (None otherwise)."""
    meta = claim.metadata
    if meta is None or keys.CLAIM_FINALIZER not in (meta.finalizers or []):
        return None
    text = (meta.annotations or {}).get(keys.CLAIM_PINNED)
    try:
        return PinRecord.model_validate_json(text) if text else None
    except ValidationError:
        return None


def holds_recorded(claim: ResourceClaim, record: PinRecord) -> bool:
    """The claim's allocation is the one the bridge recorded."""
    reserved = {r.uid for r in (claim.status.reservedFor if claim.status else None) or []}
    return allocated_devices(claim) == record.devices and reserved <= {record.pod}


def version(claim: ResourceClaim) -> dict[str, Any]:
    """A JSON Patch test of the claim's resourceVersion as read."""
    assert claim.metadata is not None
    return {"op": "test", "path": "/metadata/resourceVersion",
            "value": claim.metadata.resourceVersion}


def marks(claim: ResourceClaim, record: PinRecord) -> list[dict[str, Any]]:
    """Finalizer, job label and record, under the claim's resourceVersion."""
    meta = claim.metadata
    assert meta is not None
    ops: list[dict[str, Any]] = [version(claim)]
    if keys.CLAIM_FINALIZER not in (meta.finalizers or []):
        ops.append({"op": "add", "path": "/metadata/finalizers/-", "value": keys.CLAIM_FINALIZER}
                   if meta.finalizers else
                   {"op": "add", "path": "/metadata/finalizers", "value": [keys.CLAIM_FINALIZER]})
    ops += _put("labels", meta.labels, keys.CLAIM_JOB_LABEL, str(record.job))
    ops += _put("annotations", meta.annotations, keys.CLAIM_PINNED, record.model_dump_json())
    return ops


def unmarks(claim: ResourceClaim) -> list[dict[str, Any]]:
    """Finalizer, job label and record lifted, under the claim's resourceVersion."""
    meta = claim.metadata
    assert meta is not None
    finalizers = [f for f in meta.finalizers or [] if f != keys.CLAIM_FINALIZER]
    labels = {k: v for k, v in (meta.labels or {}).items() if k != keys.CLAIM_JOB_LABEL}
    notes = {k: v for k, v in (meta.annotations or {}).items() if k != keys.CLAIM_PINNED}
    return [version(claim),
            {"op": "add", "path": "/metadata/finalizers", "value": finalizers},
            {"op": "add", "path": "/metadata/labels", "value": labels},
            {"op": "add", "path": "/metadata/annotations", "value": notes}]


def _put(field: str, current: dict[str, str] | None, key: str, value: str) -> list[dict[str, Any]]:
    if current is None:
        return [{"op": "add", "path": f"/metadata/{field}", "value": {key: value}}]
    return [{"op": "add", "path": f"/metadata/{field}/{escaped(key)}", "value": value}]
