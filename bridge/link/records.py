"""The objects a claim is written on: the pod itself for a lone pod, a Lease per group (in
the bridge's namespace, labelled ``slurmbridge.io/group-claim``).  Each write carries the
object's resourceVersion, so of two replicas writing the same version exactly one wins.
"""

import hashlib
from typing import Protocol

from lightkube.core.exceptions import ApiError
from lightkube.models.core_v1 import Pod
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Pod as PodResource
from lightkube.types import PatchType

from bridge import keys
from bridge.jobs.owner import GroupOwner, Owner, owner_text
from bridge.kube.apierrors import is_conflict, is_not_found
from bridge.link.ownership import owner_key
from bridge.ports import KubeCreate, KubeGet, KubePatch, KubeReplace

Annotations = dict[str, str]


class OwnerChanged(Exception):
    """The pod's group labels changed while we were deciding: decide again."""


class Outdated(Exception):
    """The object's resourceVersion moved on: read it again before deciding."""


class Record(Protocol):
    """One claim object: read its annotations, write some under a precondition."""

    async def read(self) -> tuple[Annotations, str | None]:
        """Annotations and resourceVersion (None: the object does not exist yet)."""
        ...

    async def write(self, changes: dict[str, str | None], version: str | None) -> None:
        """Apply ``changes`` (None deletes) if still at ``version``, else raise Outdated."""
        ...


class PodRecordKube(KubeGet, KubePatch, Protocol):
    """The pod read, its annotations patched under its resourceVersion."""


class PodRecord:
    """A lone pod's claim lives on the pod; the first read is the copy we were given."""

    def __init__(self, kube: PodRecordKube, pod: Pod, owner: Owner) -> None:
        self._kube = kube
        self._pod: Pod | None = pod
        self._owner = owner
        meta = pod.metadata
        assert meta is not None and meta.name and meta.namespace
        self._name, self._namespace = meta.name, meta.namespace

    async def read(self) -> tuple[Annotations, str | None]:
        pod = self._pod or await self._kube.get(
            PodResource, self._name, namespace=self._namespace
        )
        self._pod = None
        if owner_key(pod) != self._owner:
            raise OwnerChanged(
                f"pod {self._namespace}/{self._name} now belongs to {owner_key(pod)}"
            )
        meta = pod.metadata or ObjectMeta()
        return dict(meta.annotations or {}), meta.resourceVersion

    async def write(self, changes: dict[str, str | None], version: str | None) -> None:
        patch = {"metadata": {"resourceVersion": version, "annotations": changes}}
        try:
            await self._kube.patch(
                PodResource, self._name, patch, namespace=self._namespace,
                patch_type=PatchType.MERGE,
            )
        except ApiError as exc:
            if is_conflict(exc):
                raise Outdated from exc
            raise


def group_claim_name(owner: GroupOwner) -> str:
    """The Lease holding a group's claim: readable, and unique per namespace/group."""
    readable = "".join(c if c.isalnum() else "-" for c in owner.group.lower()).strip("-")[:30]
    digest = hashlib.sha256(owner_text(owner).encode()).hexdigest()[:12]
    return f"group-{readable}-{digest}" if readable else f"group-{digest}"


class LeaseRecordKube(KubeCreate, KubeGet, KubeReplace, Protocol):
    """The group's Lease read, created once, replaced under its resourceVersion."""


class LeaseRecord:
    """A group's claim: a Lease in the bridge's namespace, created by the first claimer."""

    def __init__(
        self, kube: LeaseRecordKube, namespace: str, owner: GroupOwner, identity: str
    ) -> None:
        self._kube = kube
        self._namespace = namespace
        self._name = group_claim_name(owner)
        self._owner = owner
        self._identity = identity
        self._lease: Lease | None = None

    async def read(self) -> tuple[Annotations, str | None]:
        try:
            self._lease = await self._kube.get(Lease, self._name, namespace=self._namespace)
        except ApiError as exc:
            if not is_not_found(exc):
                raise
            self._lease = None
            return {}, None
        meta = self._lease.metadata or ObjectMeta()
        return dict(meta.annotations or {}), meta.resourceVersion

    async def write(self, changes: dict[str, str | None], version: str | None) -> None:
        try:
            if version is None or self._lease is None:
                annotations = {k: v for k, v in changes.items() if v is not None}
                await self._kube.create(Lease(metadata=ObjectMeta(
                    name=self._name, namespace=self._namespace,
                    labels={keys.GROUP_CLAIM: "true"},
                    annotations={keys.OWNER: owner_text(self._owner), **annotations},
                )))
                return
            meta = self._lease.metadata
            assert meta is not None
            merged: dict[str, str | None] = {**(meta.annotations or {}), **changes}
            meta.annotations = {k: v for k, v in merged.items() if v is not None}
            await self._kube.replace(self._lease)  # carries resourceVersion: 409 if moved on
        except ApiError as exc:
            if is_conflict(exc):
                raise Outdated from exc
            raise
