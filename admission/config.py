"""Admission settings, nested into the product settings as ``admission``.

Plain ``BaseModel`` (not ``BaseSettings``) so that the product's single
settings object owns the environment prefix: ``SLURMBRIDGE_ADMISSION__...``.
"""

from pathlib import Path

from pydantic import BaseModel, Field

from bridge import keys

# The user annotations a namespace policy restricts: every one that changes what Slurm grants.
POLICY_ANNOTATIONS = (
    keys.ACCOUNT, keys.PARTITION, keys.QOS, keys.RESERVATION, keys.WCKEY, keys.CONSTRAINTS,
    keys.PRIORITY, keys.TIME_LIMIT, keys.EXCLUSIVE, keys.SLURM_USER,
)


class NamespacePolicy(BaseModel):
    """What a namespace's pods may ask Slurm for.

    Accounts, partitions and QOS: an empty list allows any value.  Everything else is
    refused unless allowed here: if the bridge's Slurm user is privileged, a priority,
    reservation or unbounded time limit would let any researcher jump the queue.
    """

    accounts: list[str] = Field(default_factory=list, description="empty: any account")
    partitions: list[str] = Field(default_factory=list, description="empty: any partition")
    qos: list[str] = Field(default_factory=list, description="empty: any QOS")
    reservations: list[str] = Field(
        default_factory=list, description="reservations pods may name; empty: none"
    )
    wckeys: list[str] = Field(default_factory=list, description="wckeys pods may set; empty: none")
    allow_constraints: bool = Field(False, description="pods may set node feature constraints")
    allow_exclusive: bool = Field(False, description="pods may ask for whole nodes (exclusive)")
    max_priority: int | None = Field(
        None, ge=0, description="highest job priority pods may set; unset: no priority"
    )
    max_time_limit_minutes: int | None = Field(
        None, ge=1, description="longest time-limit annotation pods may set; unset: none"
    )

    def allowed(self, annotation: str) -> list[str]:
        """The allowed list guarding a list-valued user annotation."""
        by_key = {
            keys.ACCOUNT: self.accounts, keys.PARTITION: self.partitions, keys.QOS: self.qos,
            keys.RESERVATION: self.reservations, keys.WCKEY: self.wckeys,
        }
        return by_key.get(annotation, [])


class AdmissionSettings(BaseModel):
    """What the webhooks need to decide scope and policy, and where their TLS material is."""

    enrolled_namespaces: list[str] = Field(default_factory=list)
    bridge_namespace: str = "slurmbridge-system"
    bridge_service_account: str = "slurmbridge"
    # Replaces the service account's username, e.g. for a bridge run outside the cluster.
    bridge_username: str | None = None
    # A namespace with its own entry uses it whole; the others use ``default_policy``.
    default_policy: NamespacePolicy = Field(default_factory=NamespacePolicy)
    policies: dict[str, NamespacePolicy] = Field(default_factory=dict)
    exclude_namespaces: list[str] = Field(
        default_factory=list,
        description="namespaces the webhooks never see besides kube-system and the bridge's own "
        "(the chart's webhook.excludeNamespaces): the bridge places no pod from them",
    )
    tenancy_file: Path | None = Field(
        None,
        description="YAML file mapping each namespace to its Slurm account, user, partitions "
        "and QOS, and PriorityClasses to QOS (docs/operations.md, Tenancy); re-read when it "
        "changes.  Unset: no namespace is mapped and every pod is refused, saying so",
    )
    namespace_cache_ttl_seconds: float = Field(default=30.0, ge=0)
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    host: str = "0.0.0.0"
    port: int = Field(default=8443, ge=1, le=65535)

    @property
    def bridge_user(self) -> str:
        """The identity whose requests may write bridge-owned annotations."""
        if self.bridge_username:
            return self.bridge_username
        return f"system:serviceaccount:{self.bridge_namespace}:{self.bridge_service_account}"

    @property
    def excluded_namespaces(self) -> frozenset[str]:
        """Never in scope: placing these pods through the bridge could deadlock its own start."""
        return frozenset({"kube-system", self.bridge_namespace, *self.exclude_namespaces})

    def policy_for(self, namespace: str) -> NamespacePolicy:
        """The policy that applies to ``namespace``."""
        return self.policies.get(namespace, self.default_policy)

    def policy_setting(self, namespace: str) -> str:
        """Where the policy of ``namespace`` is set: what a refusal tells an admin to change."""
        if namespace in self.policies:
            return f"admission.policies.{namespace}"
        return "admission.default_policy"
