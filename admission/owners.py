"""Reading the objects that size a pod's group: a Job, a JobSet, the Workload API's PodGroup,
CompositePodGroup and Workload.

Only the fields ``workloads.py`` decides on are modelled; an owner that does not parse, is
missing or cannot be read is an error naming it, never a guessed group.  The reader the
webhook uses goes through the API server and keeps each answer for a controller's burst.
"""

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_namespaced_resource
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from admission.ttl_cache import TtlCache
from bridge.kube.apierrors import is_not_found


class WorkloadError(ValueError):
    """The workload asks for a group the bridge cannot form; the message says how to fix it."""


class WorkloadLookupError(RuntimeError):
    """The owner could not be read (API unreachable, RBAC): the pod cannot be placed yet."""


@dataclass(frozen=True, slots=True)
class Kind:
    group: str
    version: str
    kind: str
    plural: str
    older: tuple[str, ...] = ()
    """Versions read where the server does not serve ``version`` (an older Kubernetes)."""


JOB = Kind("batch", "v1", "Job", "jobs")
# The Workload API: v1beta1 from Kubernetes 1.37, v1alpha2 in 1.36 (same fields read here).
POD_GROUP = Kind("scheduling.k8s.io", "v1beta1", "PodGroup", "podgroups", older=("v1alpha2",))
WORKLOAD = Kind("scheduling.k8s.io", "v1beta1", "Workload", "workloads", older=("v1alpha2",))
# Kubernetes 1.37's alpha group of PodGroups (feature gate CompositePodGroup): v1alpha3 only.
COMPOSITE_POD_GROUP = Kind("scheduling.k8s.io", "v1alpha3", "CompositePodGroup",
                           "compositepodgroups")
JOBSET = Kind("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets")

OwnerReader = Callable[[Kind, str, str], Awaitable[dict[str, Any] | None]]
"""Async read of one namespaced object as a dict (None: it does not exist)."""


# --- the owners' wire shapes: only the fields read ------------------------------------------


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class _Meta(_Wire):
    name: str = ""
    uid: str = ""
    annotations: dict[str, str] = Field(default_factory=dict)


class _JobSpec(_Wire):
    parallelism: int | None = None
    completions: int | None = None


class JobObject(_Wire):
    metadata: _Meta = Field(default_factory=_Meta)
    spec: _JobSpec = Field(default_factory=_JobSpec)


class _Gang(_Wire):
    min_count: int = Field(alias="minCount")


class _Policy(_Wire):
    gang: _Gang | None = None


class _TopologyConstraint(_Wire):
    key: str


class _Constraints(_Wire):
    topology: list[_TopologyConstraint] = Field(default_factory=list)


class _WorkloadRef(_Wire):
    workload_name: str = Field(default="", alias="workloadName")
    template_name: str = Field(default="", alias="templateName")


class _PodGroupSpec(_Wire):
    # CompositePodGroup (1.37): the composite this PodGroup is one child of, and the
    # Workload's template it was made from.
    parent: str | None = Field(default=None, alias="parentCompositePodGroupName")
    workload_ref: _WorkloadRef | None = Field(default=None, alias="workloadRef")
    scheduling_policy: _Policy = Field(default_factory=_Policy, alias="schedulingPolicy")
    # TopologyAwareWorkloadScheduling (alpha in 1.36): all members within one domain of key.
    scheduling_constraints: _Constraints | None = Field(
        default=None, alias="schedulingConstraints"
    )


class PodGroupObject(_Wire):
    spec: _PodGroupSpec = Field(default_factory=_PodGroupSpec)


class _CompositeGang(_Wire):
    min_group_count: int = Field(alias="minGroupCount")


class _CompositePolicy(_Wire):
    gang: _CompositeGang | None = None  # None: basic, each child group on its own


class _CompositeSpec(_Wire):
    parent: str | None = Field(default=None, alias="parentCompositePodGroupName")
    workload_ref: _WorkloadRef | None = Field(default=None, alias="workloadRef")
    scheduling_policy: _CompositePolicy = Field(
        default_factory=_CompositePolicy, alias="schedulingPolicy"
    )
    scheduling_constraints: _Constraints | None = Field(
        default=None, alias="schedulingConstraints"
    )


class CompositePodGroupObject(_Wire):
    spec: _CompositeSpec = Field(default_factory=_CompositeSpec)


class _PodGroupTemplate(_Wire):
    name: str
    scheduling_policy: _Policy = Field(default_factory=_Policy, alias="schedulingPolicy")


class _CompositeTemplate(_Wire):
    name: str
    pod_group_templates: list[_PodGroupTemplate] = Field(
        default_factory=list, alias="podGroupTemplates"
    )
    nested: list[dict[str, Any]] = Field(default_factory=list, alias="compositePodGroupTemplates")


class _WorkloadSpec(_Wire):
    composite_templates: list[_CompositeTemplate] = Field(
        default_factory=list, alias="compositePodGroupTemplates"
    )


class WorkloadObject(_Wire):
    spec: _WorkloadSpec = Field(default_factory=_WorkloadSpec)


class _JobTemplate(_Wire):
    spec: _JobSpec = Field(default_factory=_JobSpec)


class _ReplicatedJob(_Wire):
    name: str
    replicas: int = 1
    template: _JobTemplate = Field(default_factory=_JobTemplate)


class _JobSetSpec(_Wire):
    replicated_jobs: list[_ReplicatedJob] = Field(default_factory=list, alias="replicatedJobs")


class JobSetObject(_Wire):
    metadata: _Meta = Field(default_factory=_Meta)
    spec: _JobSetSpec = Field(default_factory=_JobSetSpec)


M = TypeVar("M", bound=_Wire)


async def load(read: OwnerReader, kind: Kind, model: type[M], namespace: str, name: str) -> M:
    """The owner ``namespace/name`` of ``kind``, parsed; raises WorkloadLookupError when it
    cannot be read or does not exist (yet), WorkloadError when it does not parse."""
    ref = f"{kind.kind} {namespace}/{name}"
    try:
        found = await read(kind, namespace, name)
    except Exception as err:  # unreachable, RBAC: never guess a group
        raise WorkloadLookupError(f"cannot read {ref} to size the pod's group: {err}") from err
    if found is None:  # e.g. a PodGroup created after its pods: the creator retries
        raise WorkloadLookupError(f"{ref}, which sizes this pod's group, does not exist (yet)")
    try:
        return model.model_validate(found)
    except ValidationError as err:
        raise WorkloadError(f"{ref} cannot be read: {err.errors()[0]['msg']}") from None


OWNER_CACHE_SECONDS = 2.0
"""A controller creates a workload's pods in a burst: one read of the owner serves it."""


def kube_owner_reader(
    client: AsyncClient, clock: Callable[[], float] = time.monotonic
) -> OwnerReader:
    """Reads owners through the API server, each answer kept for OWNER_CACHE_SECONDS."""
    served: dict[Kind, str] = {}  # the version the server answered for, once it has
    answers = TtlCache[tuple[Kind, str, str], dict[str, Any] | None](OWNER_CACHE_SECONDS, clock)

    async def read(kind: Kind, namespace: str, name: str) -> dict[str, Any] | None:
        return await answers.get((kind, namespace, name), lambda: fetch(kind, namespace, name))

    async def fetch(kind: Kind, namespace: str, name: str) -> dict[str, Any] | None:
        known = served.get(kind)
        for version in [known] if known else [kind.version, *kind.older]:
            resource: Any = create_namespaced_resource(kind.group, version, kind.kind, kind.plural)
            try:
                found = await client.get(resource, name, namespace=namespace)
            except ApiError as err:
                if not is_not_found(err):
                    raise
                if not known and not _names_the_object(err):
                    continue  # this version is not served here: the next one
                found = None
            served[kind] = version
            return found.to_dict() if found is not None else None
        return None

    return read


def _names_the_object(err: ApiError) -> bool:
    """A 404 about the object itself; the one for a version the server does not serve (the
    resource unknown) carries no details."""
    details = err.status.details
    return details is not None and bool(details.name)
