"""Admission settings, nested into the product settings as ``admission``.

Plain ``BaseModel`` (not ``BaseSettings``) so that the product's single
settings object owns the environment prefix: ``SLURMBRIDGE_ADMISSION__...``.
"""

from pathlib import Path

from pydantic import BaseModel, Field

from bridge import keys

# The user annotations a namespace policy restricts.
POLICY_ANNOTATIONS = (keys.ACCOUNT, keys.PARTITION, keys.QOS)


class NamespacePolicy(BaseModel):
    """Slurm values a namespace's pods may ask for; an empty list allows anything."""

    accounts: list[str] = Field(default_factory=list)
    partitions: list[str] = Field(default_factory=list)
    qos: list[str] = Field(default_factory=list)

    def allowed(self, annotation: str) -> list[str]:
        """The allowed list guarding one user annotation (empty: unrestricted)."""
        by_key = {keys.ACCOUNT: self.accounts, keys.PARTITION: self.partitions, keys.QOS: self.qos}
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
        return frozenset({"kube-system", self.bridge_namespace})

    def policy_for(self, namespace: str) -> NamespacePolicy:
        """The policy that applies to ``namespace``."""
        return self.policies.get(namespace, self.default_policy)
