"""Settings from a YAML file and the environment (``SLURMBRIDGE_<SECTION>__<FIELD>``).

pydantic-settings does the parsing and validation, so a typo in a value fails at
start-up with the setting's name instead of at the first pod.
"""

import os
from pathlib import Path
from typing import Final, Literal

from pydantic import BaseModel, Field, SecretStr
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from admission.config import AdmissionSettings

CONFIG_FILE_ENV: Final = "SLURMBRIDGE_CONFIG_FILE"


class SlurmSettings(BaseModel):
    url: str = Field("http://127.0.0.1:6820", description="slurmrestd base URL")
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
    data_parser: str | None = Field(
        None, description="pin a data parser such as v0.0.41; default: newest both sides know"
    )
    timeout_seconds: float = Field(10.0, gt=0)
    retries: int = Field(3, ge=0, description="attempts after the first on transient failures")
    backoff_seconds: float = Field(0.2, ge=0, description="first retry delay, doubled each time")
    max_connections: int = Field(16, ge=1)


class KubeSettings(BaseModel):
    kubeconfig: Path | None = Field(
        None, description="kubeconfig file; default: in-cluster config or $KUBECONFIG"
    )


class PlacementSettings(BaseModel):
    poll_interval_seconds: float = Field(2.0, gt=0, description="cheap Slurm state poll")
    fast_poll_interval_seconds: float = Field(
        0.5, gt=0, description="the poll's period for fast_poll_window_seconds after a submit"
    )
    fast_poll_window_seconds: float = Field(
        10.0, ge=0, description="how long after a submit the fast poll lasts"
    )
    resync_interval_seconds: float = Field(
        300.0, gt=0, description="full Slurm job listing (rebuilds the index, cancels duplicates)"
    )
    reasons_per_cycle: int = Field(
        5, ge=0, description="pending jobs whose Slurm reason is re-read each poll"
    )
    node_refresh_seconds: float = Field(15.0, gt=0, description="Kubernetes Node list refresh")
    notify_quiet_seconds: float = Field(
        10.0, ge=0,
        description="a pod's Slurm status (event, condition) is first shown after this: "
        "jobs Slurm starts sooner are never reported as pending",
    )
    submit_on_create: bool = Field(
        True,
        description="submit a pod's job when the pod appears (leader only), before "
        "kube-scheduler's first filter; off: filter submits",
    )
    submit_workers: int = Field(16, ge=1, description="parallel submissions of submit_on_create")
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


class ControllerSettings(BaseModel):
    enabled: bool = Field(True, description="run the lifecycle and node controllers (leader only)")
    interval_seconds: float = Field(2.0, gt=0, description="reconcile period")
    orphan_grace_seconds: float = Field(
        30.0, ge=0, description="a job whose pod never appears is cancelled after this"
    )
    lease_namespace: str = Field("slurmbridge-system", description="namespace of the Lease")
    lease_name: str = "slurmbridge-controllers"
    lease_seconds: int = Field(15, ge=3, description="leader lease duration")
    identity: str | None = Field(None, description="leader identity; default hostname_pid")


class ExtenderSettings(BaseModel):
    """kube-scheduler reaches the extender over mutual TLS only; probes and metrics do not."""

    host: str = "0.0.0.0"
    port: int = Field(8888, ge=1, le=65535, description="filter/prioritize/bind, HTTPS only")
    health_port: int = Field(
        8889, ge=1, le=65535, description="plain HTTP: /healthz, /readyz, /metrics (nothing acts)"
    )
    tls_cert_file: Path | None = Field(None, description="serving certificate (PEM)")
    tls_key_file: Path | None = Field(None, description="its private key (PEM)")
    client_ca_file: Path | None = Field(
        None,
        description="CA that signed kube-scheduler's client certificate (its extender "
        "tlsConfig certFile): callers without a certificate from it are refused",
    )


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="SLURMBRIDGE_", env_nested_delimiter="__", extra="forbid"
    )

    slurm: SlurmSettings = SlurmSettings()
    kube: KubeSettings = KubeSettings()
    placement: PlacementSettings = PlacementSettings()
    controllers: ControllerSettings = ControllerSettings()
    extender: ExtenderSettings = ExtenderSettings()
    admission: AdmissionSettings = AdmissionSettings()

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
