"""The parts of a Pod the webhooks read, checked for shape before anything touches them.

Extra fields are kept (not validated): the webhooks only ever patch what they
read here, and list positions match the raw object so patch paths stay valid.
"""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from bridge import keys


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class EnvVar(_Open):
    name: str


class Resources(_Open):
    requests: dict[str, Any] | None = None
    limits: dict[str, Any] | None = None


class Container(_Open):
    name: str
    env: list[EnvVar] | None = None
    resources: Resources | None = None
    restart_policy: str | None = Field(default=None, alias="restartPolicy")


class Toleration(_Open):
    key: str | None = None
    operator: str | None = None
    effect: str | None = None


class SchedulingGroup(_Open):
    """``spec.schedulingGroup`` (Workload API, Kubernetes 1.36+): the pod's PodGroup."""

    pod_group_name: str | None = Field(default=None, alias="podGroupName")


class SpreadConstraint(_Open):
    topology_key: str = Field(default="", alias="topologyKey")
    when_unsatisfiable: str = Field(default="DoNotSchedule", alias="whenUnsatisfiable")


class PodAffinityTerm(_Open):
    topology_key: str = Field(default="", alias="topologyKey")


class PodAffinity(_Open):
    """``podAffinity`` or ``podAntiAffinity``: the hard terms read; the soft ones counted."""

    required: list[PodAffinityTerm] | None = Field(
        default=None, alias="requiredDuringSchedulingIgnoredDuringExecution"
    )
    preferred: list[dict[str, Any]] | None = Field(
        default=None, alias="preferredDuringSchedulingIgnoredDuringExecution"
    )


class Affinity(_Open):
    pod_affinity: PodAffinity | None = Field(default=None, alias="podAffinity")
    pod_anti_affinity: PodAffinity | None = Field(default=None, alias="podAntiAffinity")


class PodResourceClaim(_Open):
    """One ``spec.resourceClaims`` entry: a DRA claim by name, or a template to make one."""

    name: str
    resource_claim_name: str | None = Field(default=None, alias="resourceClaimName")
    resource_claim_template_name: str | None = Field(
        default=None, alias="resourceClaimTemplateName"
    )


class PodSpec(_Open):
    containers: list[Container] = Field(min_length=1)
    init_containers: list[Container] | None = Field(default=None, alias="initContainers")
    ephemeral_containers: list[Container] | None = Field(
        default=None, alias="ephemeralContainers"
    )
    tolerations: list[Toleration] | None = None
    scheduler_name: str | None = Field(default=None, alias="schedulerName")
    node_name: str | None = Field(default=None, alias="nodeName")
    active_deadline_seconds: int | None = Field(default=None, alias="activeDeadlineSeconds")
    scheduling_gates: list[dict[str, Any]] | None = Field(default=None, alias="schedulingGates")
    scheduling_group: SchedulingGroup | None = Field(default=None, alias="schedulingGroup")
    priority_class_name: str | None = Field(default=None, alias="priorityClassName")
    topology_spread_constraints: list[SpreadConstraint] | None = Field(
        default=None, alias="topologySpreadConstraints"
    )
    affinity: Affinity | None = None
    resource_claims: list[PodResourceClaim] | None = Field(default=None, alias="resourceClaims")


class OwnerReference(_Open):
    api_version: str = Field(default="", alias="apiVersion")
    kind: str = ""
    name: str = ""
    uid: str = ""
    controller: bool | None = None


class ObjectMeta(_Open):
    name: str | None = None
    namespace: str | None = None
    annotations: dict[str, str] | None = None
    labels: dict[str, str] | None = None
    owner_references: list[OwnerReference] | None = Field(default=None, alias="ownerReferences")


class PodShape(_Open):
    """A pod as far as the webhooks are concerned; ``model_validate`` rejects what is not one."""

    kind: Literal["Pod"] = "Pod"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: PodSpec

    @property
    def annotations(self) -> dict[str, str]:
        return self.metadata.annotations or {}

    @property
    def is_bound(self) -> bool:
        return bool(self.spec.node_name)

    def bridge_annotations(self) -> dict[str, str]:
        """The ``slurmbridge.io/*`` annotations and slurm-bridge's aliases of them
        (``slurmjob.slinky.slurm.net/*``), the ones whose changes the webhooks guard."""
        prefixes = (keys.PREFIX, keys.SLINKY_PREFIX)
        return {k: v for k, v in self.annotations.items() if k.startswith(prefixes)}

    def gate_names(self) -> list[str]:
        return [str(g.get("name", "")) for g in self.spec.scheduling_gates or []]

    def bridge_labels(self) -> dict[str, str]:
        """The ``slurmbridge.io/*`` labels (pod groups): fixed once the pod may have a job."""
        labels = self.metadata.labels or {}
        return {k: v for k, v in labels.items() if k.startswith(keys.PREFIX)}
