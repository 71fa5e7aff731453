"""B7, the bridge's own per-pod writes: each through the path the product called before
(lightkube's models over the bridge's aiohttp transport) and the one it calls now (the
bare writes of ``bridge/kube/podwrites.py``), side by side in ``b7_kube``'s rounds.

- release: the JSON Patch ``bridge/link/gate.py`` builds for a gated pod (the gate lifted,
  the job's annotations, the node affinity, the toleration), answered with the pod;
  before: ``client.patch(Pod, ..., patch_type=JSON)``, after: ``client.patch_pod``, which
  ``Releaser`` calls;
- binding: before, the Binding model created (its Status answer failing lightkube's decoder,
  which the bridge swallowed), as ``writes.bind`` did; after, ``writes.bind``;
- event: before, the Event model created, as ``writes.record_event`` did; after,
  ``writes.record_event``.

The "before" code is kept here as it was in bridge/kube/writes.py (git: before issue 42's
bare writes), so the figure compares what the product paid with what it pays.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import msgspec

from benchmarks.common import Figure

if TYPE_CHECKING:
    from lightkube import AsyncClient, KubeConfig

    from benchmarks.b7_exchanges import FigureMaker

Exchange = Callable[[str], Awaitable[int]]
WRITE_KINDS = ("release", "binding", "event")
WRITE_LABELS = {
    "release": "bridge's release PATCH (JSON Patch of a gated pod)",
    "binding": "bridge's Binding POST",
    "event": "bridge's pod Event POST",
}
BEFORE, AFTER = "before: lightkube (aiohttp)", "after: bare aiohttp"
WRITE_PATHS = (BEFORE, AFTER)


async def lightkube_bind(client: AsyncClient, ns: str, name: str, uid: str, node: str,
                         *, annotations: dict[str, str]) -> None:
    """``writes.bind`` as it was: the Binding model, its Status answer not a Binding."""
    from lightkube.models.core_v1 import ObjectReference  # noqa: PLC0415
    from lightkube.models.meta_v1 import ObjectMeta  # noqa: PLC0415
    from lightkube.resources.core_v1 import Pod  # noqa: PLC0415

    binding = Pod.Binding(
        metadata=ObjectMeta(name=name, namespace=ns, uid=uid, annotations=dict(annotations)),
        target=ObjectReference(kind="Node", name=node, apiVersion="v1"),
    )
    with contextlib.suppress(msgspec.ValidationError):
        await client.create(binding, name=name, namespace=ns)


async def lightkube_event(client: AsyncClient, ns: str, name: str, uid: str) -> None:
    """``writes.record_event`` as it was: the Event model built and created."""
    from lightkube.models.core_v1 import EventSource, ObjectReference  # noqa: PLC0415
    from lightkube.models.meta_v1 import ObjectMeta  # noqa: PLC0415
    from lightkube.resources.core_v1 import Event  # noqa: PLC0415

    now = datetime.now(UTC)
    about = ObjectReference(apiVersion="v1", kind="Pod", name=name, namespace=ns, uid=uid)
    await client.create(Event(
        metadata=ObjectMeta(generateName=f"{name}.", namespace=ns), involvedObject=about,
        reason="SlurmPending", message="pending", type="Normal",
        source=EventSource(component="slurmbridge"), firstTimestamp=now, lastTimestamp=now,
        count=1, reportingComponent="slurmbridge",
    ))


def _gated_pod() -> Any:
    from lightkube.models.core_v1 import Pod  # noqa: PLC0415

    from benchmarks.b7_kube import pod_doc  # noqa: PLC0415

    doc = pod_doc()
    doc["spec"]["schedulingGates"] = [{"name": "slurmbridge.io/slurm"}]
    return Pod.from_dict(doc)


@contextlib.asynccontextmanager
async def write_paths(config: KubeConfig) -> AsyncIterator[dict[str, Exchange]]:
    """The two paths, each on a client as ``bridge/kube/connection.py`` builds it."""
    from lightkube.resources.core_v1 import Pod  # noqa: PLC0415
    from lightkube.types import PatchType  # noqa: PLC0415

    from benchmarks.b7_kube import NAME, NODE, NS, UID, _bound, _Ref  # noqa: PLC0415
    from bridge import keys  # noqa: PLC0415
    from bridge.kube import writes  # noqa: PLC0415
    from bridge.kube.connection import client_for  # noqa: PLC0415
    from bridge.link.gate import release_patch  # noqa: PLC0415

    pod, recorded = _gated_pod(), _bound()
    before, after = client_for(config), client_for(config)

    async def old(kind: str) -> int:
        if kind == "release":
            await before.patch(Pod, NAME, release_patch(pod, NODE, recorded), namespace=NS,
                               patch_type=PatchType.JSON)
        elif kind == "binding":
            await lightkube_bind(before, NS, NAME, UID, NODE, annotations=recorded)
        else:
            await lightkube_event(before, NS, NAME, UID)
        return 1

    async def new(kind: str) -> int:
        if kind == "release":
            await after.patch_pod(NS, NAME, release_patch(pod, NODE, recorded))
        elif kind == "binding":
            await writes.bind(after, NS, NAME, UID, NODE, annotations=recorded)
        else:
            await writes.record_event(after, _Ref(), keys.EventReason.PENDING, "pending")
        return 1

    try:
        yield {BEFORE: old, AFTER: new}
    finally:
        await before.close()
        await after.close()


def write_figures(make: FigureMaker) -> list[Figure]:
    out: list[Figure] = []
    for kind in WRITE_KINDS:
        label = WRITE_LABELS[kind]
        out += [make.fig(f"{label}: {path}", "µs", f"{path}|{kind}") for path in WRITE_PATHS]
        out.append(make.ratio(f"{label}: before / after", f"{BEFORE}|{kind}",
                              f"{AFTER}|{kind}", ">= 1.5x: keep the bare writes"))
    return out


WRITE_NOTE = (
    "The bridge's own per-pod writes, before and after issue 42's bare writes, each on a "
    "client as `bridge/kube/connection.py` builds it, in the same rounds as the stacks above: "
    "`release` is the JSON Patch `bridge/link/gate.py` builds for a gated pod, sent by "
    "lightkube's `patch` (before) and by `BridgeClient.patch_pod` (after, what `Releaser` "
    "calls), answered with the pod; `binding` and `event` are `writes.bind` and "
    "`writes.record_event` as they were (lightkube's Binding and Event models; "
    "benchmarks/b7_podwrites.py keeps that code) and as they are (plain bodies encoded by "
    "msgspec, nothing of a success decoded)."
)
