"""Settings from a YAML file and the environment (``SLURMBRIDGE_<SECTION>__<FIELD>``).

pydantic-settings does the parsing and validation, so a typo in a value or a key, at any
depth, fails at start-up with the setting's name instead of at the first pod.
"""

import os
from pathlib import Path
from typing import Final, Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from bridge import keys
from bridge.section import Section
from bridge.tls_settings import SlurmTlsSettings
from bridge.urls import HttpURL

CONFIG_FILE_ENV: Final = "SLURMBRIDGE_CONFIG_FILE"


class SlurmSettings(Section):
    url: HttpURL = Field(description="slurmrestd base URL, e.g. https://slurmctl.example.org:6820")
    user: str = Field("slurm", description="Slurm user the JWT belongs to (X-SLURM-USER-NAME)")
    token: SecretStr | None = Field(None, description="JWT; prefer token_file for rotation")
    token_file: Path | None = Field(None, description="file holding the JWT, re-read on change")
    jwt_key_file: Path | None = Field(
        None,
        description="the cluster's JWT key (AuthAltParameters=jwt_key=...): the bridge mints a "
        "short-lived token per Slurm user, so placeholders run as each namespace's user; "
        "re-read on change; takes precedence over token/token_file",
    )
    token_lifespan_seconds: int = Field(
        300, ge=30, description="lifespan of each token minted with jwt_key_file"
    )
    owner_key_file: Path | None = Field(None, description="file holding the secret (16+ bytes, "
        "one for all replicas) signing the placeholders' owner markers; the extender needs it")
    data_parser: str | None = Field(
        None, description="pin a data parser such as v0.0.41; default: newest both sides know"
    )
    timeout_seconds: float = Field(10.0, gt=0)
    retries: int = Field(3, ge=0, description="attempts after the first on transient failures")
    backoff_seconds: float = Field(0.2, ge=0, description="first retry delay, doubled each time")
    max_connections: int = Field(16, ge=1)
    tls: SlurmTlsSettings = Field(default_factory=SlurmTlsSettings)


class KubeSettings(Section):
    kubeconfig: Path | None = Field(
        None, description="kubeconfig file; default: in-cluster config or $KUBECONFIG"
    )


class PlacementSettings(Section):
    poll_interval_seconds: float = Field(2.0, gt=0, description="cheap Slurm state poll")
    fast_poll_interval_seconds: float = Field(
        0.5, gt=0, description="the poll's period for fast_poll_window_seconds after a submit"
    )
    fast_poll_window_seconds: float = Field(
        10.0, ge=0, description="how long after a submit the fast poll lasts"
    )
    resync_interval_seconds: float = Field(
        300.0, gt=0,
        description="Slurm resync: every job's state, each live job not seen before read once "
        "(rebuilds the index, cancels duplicates)",
    )
    reasons_per_cycle: int = Field(
        5, ge=0, description="pending jobs whose Slurm reason is re-read each poll"
    )
    reason_refresh_seconds: float = Field(
        10.0, ge=0, description="a pending job's Slurm reason is re-read at most this often"
    )
    expected_start_moves_seconds: float = Field(
        120.0, ge=0,
        description="a pending pod is told Slurm's expected start again (event; condition "
        "when ungated) once the backfill's estimate moved by more than this; it is read with "
        "the reason, so at most once per reason_refresh_seconds",
    )
    notify_quiet_seconds: float = Field(
        10.0, ge=0,
        description="a pod's Slurm status (event, condition) is first shown after this: "
        "jobs Slurm starts sooner are never reported as pending",
    )
    submit_workers: int = Field(16, ge=1, description="parallel submissions of the leader's intake")
    unready_after_seconds: float = Field(
        120.0, gt=0,
        description="/readyz turns unready once the poller has not read Slurm for this long "
        "(slurmrestd unreachable, or answers it cannot parse); shorter outages stay ready so "
        "kube-scheduler keeps reaching a replica and pods read why they wait",
    )
    cuda_visible_devices: Literal["renumbered", "physical"] = Field(
        "renumbered",
        description="CUDA_VISIBLE_DEVICES in pods: renumbered (0..n-1, as the NVIDIA container "
        "runtime shows a container only its GPUs) or physical (Slurm's indices, for runtimes "
        "that mount every device unrenumbered, e.g. privileged pods with hostPath /dev)",
    )


class ControllerSettings(Section):
    enabled: bool = Field(True, description="run the lifecycle and node controllers (leader only)")
    interval_seconds: float = Field(2.0, gt=0, description="reconcile period")
    orphan_grace_seconds: float = Field(
        30.0, ge=0, description="a job whose pod never appears is cancelled after this"
    )
    lease_namespace: str = Field("slurmbridge-system", description="namespace of the Lease")
    lease_name: str = "slurmbridge-controllers"
    lease_seconds: int = Field(15, ge=3, description="leader lease duration")
    identity: str | None = Field(None, description="leader identity; default hostname_pid")
    external_node_feature: str = Field(
        "slurmbridge-external", pattern=r"^[A-Za-z0-9_.-]{1,64}$",
        description="Slurm feature of every node registered for a Node labelled "
        f"{keys.EXTERNAL_NODE}=true (a NodeSet by it puts them in partitions)",
    )


class ExtenderSettings(Section):
    """kube-scheduler reaches the extender over mutual TLS only; probes and metrics do not."""

    host: str = "0.0.0.0"
    port: int = Field(8888, ge=1, le=65535, description="filter/prioritize/bind, HTTPS only")
    health_port: int = Field(
        8889, ge=1, le=65535, description="plain HTTP: /healthz, /readyz, /metrics (nothing acts)"
    )
    drain_seconds: float = Field(
        0, ge=0, le=300,
        description="after SIGTERM, keep serving this long, each response closing its connection, "
        "so clients reconnect to a live replica while the Service catches up (the chart: "
        "shutdownDelaySeconds); 0 stops at once",
    )
    tls_cert_file: Path | None = Field(None, description="serving certificate (PEM)")
    tls_key_file: Path | None = Field(None, description="its private key (PEM)")
    client_ca_file: Path | None = Field(
        None,
        description="CA that signed kube-scheduler's client certificate (its extender "
        "tlsConfig certFile): callers without a certificate from it are refused",
    )


class NamespacePolicy(Section):
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
    allow_topology: bool = Field(
        False, description="pods may ask for switches, a switch wait or a segment size"
    )
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


class AdmissionSettings(Section):
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
    drain_seconds: float = Field(
        0, ge=0, le=300,
        description="after SIGTERM, keep serving this long, each response closing its connection, "
        "so clients reconnect to a live replica while the Service catches up (the chart: "
        "shutdownDelaySeconds); 0 stops at once",
    )

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


class DeviceClassGres(Section):
    """What one DRA DeviceClass is in Slurm: a claim's request of the class is a request of
    this many GRES, and the devices the bridge writes into the claim are the ones whose
    ``index_attribute`` equals the indices Slurm allocated."""

    # gres: whole GPUs, or shards of one (through the class's extended resource only: a
    # claim names devices, and one GPU's shards go to several pods).
    gres: Literal["gpu", "shard"] = "gpu"
    type: str | None = Field(None, pattern=r"^[A-Za-z0-9_.-]+$")  # gres/gpu:<type>:N; none: any
    driver: str | None = None  # the DRA driver publishing the devices; None: the class's name
    index_attribute: str = "index"  # the device attribute holding Slurm's GPU index

    @model_validator(mode="after")
    def _shards_have_no_type(self) -> "DeviceClassGres":
        if self.gres == "shard" and self.type is not None:
            raise ValueError("a shard class has no GPU type: Slurm's shards are untyped")
        return self


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="SLURMBRIDGE_", env_nested_delimiter="__", extra="forbid"
    )

    slurm: SlurmSettings
    kube: KubeSettings = KubeSettings()
    placement: PlacementSettings = PlacementSettings()
    controllers: ControllerSettings = ControllerSettings()
    extender: ExtenderSettings = ExtenderSettings()
    admission: AdmissionSettings = AdmissionSettings()
    device_classes: dict[str, DeviceClassGres] = Field(
        default_factory=dict,
        description="DRA DeviceClass name -> {gres: gpu or shard (shards: through the class's "
        "extended resource only), type: a Slurm GPU type (none: any), "
        "driver: the DRA driver (default: the class name), index_attribute: the device "
        "attribute holding Slurm's GPU index (default: index)}: claims of these classes are "
        "Slurm's to allocate; the webhook refuses any other class on a slurmbridge pod",
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Arguments beat the environment, which beats the YAML file (if one is named)."""
        path = os.environ.get(CONFIG_FILE_ENV)
        if not path:
            return (init_settings, env_settings)
        if not Path(path).is_file():
            raise ValueError(f"{CONFIG_FILE_ENV}={path}: no such file")
        return (init_settings, env_settings, YamlConfigSettingsSource(settings_cls, yaml_file=path))
