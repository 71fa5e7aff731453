"""What the core needs of Slurm and of Kubernetes, and nothing more.

The controllers, the placement classes and the binder are written against these two
protocols, not against a client: ``SlurmClient`` (bridge/slurm/client.py) and the
bridge's ``BridgeClient`` (lightkube's ``AsyncClient``, bridge/kube/podwrites.py) satisfy
them as they are, the composition root (slurmbridge_cli/compose.py) builds those, and the
unit tests hand in the in-memory fakes of slurmbridge_devkit/fakes.py.

``KubePort`` is the part of lightkube's client the core calls, with lightkube's own
signatures (its overloads tell cluster-scoped from namespaced kinds), so the core keeps
lightkube's typed models and ``ApiError``.  ``BridgeKubePort`` adds the three writes made
for every pod (the release's JSON Patch, the Binding, an Event), which take plain bodies and
read nothing of the answer (B7: lightkube's models cost more than the exchange), sent bare
by the bridge's client (bridge/kube/podwrites.py) and raising lightkube's ``ApiError`` all
the same.

Each consumer declares, next to it, the narrow interface it uses (as slurm-bridge's
``slurmcontrol.go`` per controller): the Slurm methods it calls, and the Kubernetes verbs
below (``KubeGet``, ``KubePatch``, ...), which carry lightkube's overloads once.  The two
ports are what the composition root hands in; mypy checks that they, and the dev kit's
fakes, satisfy each consumer's interface where the parts are wired.
"""

from collections.abc import AsyncIterable, Iterable
from typing import Any, Protocol, overload

from lightkube.core.client import (
    AllNamespacedResource,
    FieldSelector,
    GlobalResource,
    GlobalSubResource,
    LabelSelector,
    NamespacedResource,
    NamespacedSubResource,
)
from lightkube.types import PatchType

from bridge.jobs.request import JobRequest
from bridge.slurm.types import Accounting, Allocation, JobState, NodeTable, SlurmJob

# A merge or strategic patch (a partial object), or a JSON Patch (a list of operations).
PatchBody = dict[str, Any] | list[dict[str, Any]]


class SlurmPort(Protocol):
    """slurmrestd as the core uses it: placeholder jobs, node states, accounting."""

    async def submit(self, req: JobRequest) -> int:
        """Submit a placeholder job; its id.  Never retried once it may have been sent."""
        ...

    async def get_job(self, job_id: int) -> SlurmJob:
        """One job, read now; ``SlurmJobNotFound`` when Slurm no longer knows it."""
        ...

    async def job_allocation(self, job_id: int) -> Allocation | None:
        """A running job's nodes and GPU indices alone (None: ask ``get_job`` instead)."""
        ...

    async def job_states(self, ids: Iterable[int]) -> dict[int, JobState]:
        """States of the jobs ``ids`` only (absent: Slurm no longer lists it): the cheap
        poll, whose cost follows the bridge's own jobs, not Slurm's queue."""
        ...

    async def every_job_state(self) -> dict[int, JobState | None]:
        """Id and state (None: unknown to the bridge) of every job: what a resync starts
        from, never the full listing."""
        ...

    async def ping(self) -> None:
        """Raise a ``SlurmError`` unless slurmctld answers: the poll with nothing to read."""
        ...

    async def cancel(self, job_id: int) -> None:
        """Cancel; a job Slurm no longer knows counts as cancelled."""
        ...

    async def node_table(self) -> NodeTable: ...

    async def node_table_since(self, read_at: int) -> NodeTable | None:
        """None when no node changed since the table read at ``read_at``: node sync's round
        (bridge/slurm/node_listing.py)."""
        ...

    async def drain(self, node: str, reason: str) -> None: ...

    async def resume(self, node: str) -> None: ...

    async def add_node(self, node_conf: str) -> None:
        """Register a dynamic node (a slurm.conf NodeName= line); SlurmUnsupported before
        Slurm 25.11."""

    async def delete_node(self, node: str) -> None: ...

    async def accounting(self) -> Accounting:
        """Accounts, users and QOS from slurmdbd."""
        ...

    async def aclose(self) -> None: ...


class SlurmNodes(Protocol):
    """What each node controller writes of Slurm's nodes (it reads them through NodeTables)."""

    async def drain(self, node: str, reason: str) -> None: ...


class KubeGet(Protocol):
    @overload
    async def get(self, res: type[GlobalResource], name: str) -> GlobalResource: ...
    @overload
    async def get(
        self, res: type[AllNamespacedResource], name: str, *, namespace: str | None = None
    ) -> AllNamespacedResource: ...


class KubeList(Protocol):
    @overload
    def list(
        self, res: type[GlobalResource], *,
        labels: LabelSelector | None = None, fields: FieldSelector | None = None,
    ) -> AsyncIterable[GlobalResource]: ...
    @overload
    def list(
        self, res: type[NamespacedResource], *, namespace: str | None = None,
        labels: LabelSelector | None = None, fields: FieldSelector | None = None,
    ) -> AsyncIterable[NamespacedResource]: ...


class KubeWatch(Protocol):
    @overload
    def watch(
        self, res: type[GlobalResource], *,
        labels: LabelSelector | None = None, fields: FieldSelector | None = None,
        resource_version: str | None = None,
    ) -> AsyncIterable[tuple[str, GlobalResource]]: ...
    @overload
    def watch(
        self, res: type[NamespacedResource], *, namespace: str | None = None,
        labels: LabelSelector | None = None, fields: FieldSelector | None = None,
        resource_version: str | None = None,
    ) -> AsyncIterable[tuple[str, NamespacedResource]]: ...


class KubePatch(Protocol):
    @overload
    async def patch(
        self, res: type[GlobalSubResource], name: str, obj: PatchBody, *,
        patch_type: PatchType = PatchType.STRATEGIC,
    ) -> GlobalSubResource: ...
    @overload
    async def patch(
        self, res: type[GlobalResource], name: str, obj: PatchBody, *,
        patch_type: PatchType = PatchType.STRATEGIC,
    ) -> GlobalResource: ...
    @overload
    async def patch(
        self, res: type[AllNamespacedResource], name: str, obj: PatchBody, *,
        namespace: str | None = None, patch_type: PatchType = PatchType.STRATEGIC,
    ) -> AllNamespacedResource: ...


class KubeCreate(Protocol):
    @overload
    async def create(
        self, obj: NamespacedSubResource, name: str, *, namespace: str | None = None
    ) -> NamespacedSubResource: ...
    @overload
    async def create(self, obj: NamespacedResource) -> NamespacedResource: ...


class KubeReplace(Protocol):
    async def replace(self, obj: NamespacedResource) -> NamespacedResource:
        """Replace the object; its resourceVersion is the precondition (409 if it moved)."""
        ...


class KubeDelete(Protocol):
    async def delete(
        self, res: type[NamespacedResource], name: str, *, namespace: str | None = None
    ) -> None: ...


class KubePatchPod(Protocol):
    async def patch_pod(self, namespace: str, name: str, ops: list[dict[str, Any]]) -> None:
        """A JSON Patch of the pod: 404 when it is gone, 409 or 422 when a ``test`` fails."""
        ...


class KubeBindPod(Protocol):
    async def bind_pod(self, namespace: str, name: str, binding: dict[str, Any]) -> None:
        """Create the pod's Binding: 409 when it is bound, or its UID is not the Binding's."""
        ...


class KubeCreateEvent(Protocol):
    async def create_event(self, namespace: str, event: dict[str, Any]) -> None:
        """Create an Event (``metadata.generateName`` names it)."""
        ...


class KubePort(
    KubeGet, KubeList, KubeWatch, KubePatch, KubeCreate, KubeReplace, KubeDelete, Protocol
):
    """The apiserver as lightkube's ``AsyncClient`` serves it (what the CLI's views read
    through too), one protocol a verb: a consumer declares the verbs it calls."""


class BridgeKubePort(KubePort, KubePatchPod, KubeBindPod, KubeCreateEvent, Protocol):
    """The apiserver as the bridge uses it: lightkube's verbs and the per-pod writes."""
