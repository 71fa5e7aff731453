"""The composition root: the real Slurm and Kubernetes clients, handed to the bridge and
the webhook.

Everything below takes the ports of bridge/ports.py (the webhook: admission/lookups.py); this
is the one place that decides they are slurmrestd and the apiserver.  A test or an offline
benchmark passes its fakes (slurmbridge_devkit/fakes.py) for either and gets the same wiring
otherwise.
"""

from fastapi import FastAPI
from lightkube import AsyncClient

from admission.lookups import Lookups
from admission.webhook import create_app
from bridge.config import Settings
from bridge.kube.connection import kube_client
from bridge.policy.tenancy import TenancySource, placeholder_trust
from bridge.ports import BridgeKubePort, SlurmPort
from bridge.runtime import Bridge
from bridge.slurm.client import SlurmClient
from bridge.slurm.signing import OwnerSigner


def build_bridge(
    settings: Settings, *, slurm: SlurmPort | None = None, kube: BridgeKubePort | None = None
) -> Bridge:
    """The bridge over slurmrestd and the apiserver of ``settings``, unless given others."""
    tenancy = TenancySource(settings.admission.tenancy_file)
    return Bridge(
        settings, tenancy=tenancy, slurm=slurm or slurm_client(settings, tenancy),
        kube=kube or kube_client(settings.kube.kubeconfig),
    )


def slurm_client(settings: Settings, tenancy: TenancySource) -> SlurmClient:
    """Placeholders run as the namespaces' Slurm users: the tenancy says whose job may be
    ours, the owner key (required, checked after the Slurm credential: a clear error at start
    without it) signs and verifies the owner marker of each."""
    client = SlurmClient(settings.slurm, trust=placeholder_trust(tenancy))  # credential first
    client.signer = OwnerSigner.from_file(settings.slurm.owner_key_file)
    return client


def build_webhook(settings: Settings, *, kube: AsyncClient | None = None) -> FastAPI:
    """The webhook over the apiserver of ``settings`` (unless given another client): its
    process's one client, on the bridge's transport, through which every review reads."""
    kube = kube or kube_client(settings.kube.kubeconfig)
    return create_app(
        settings.admission, Lookups.through(kube), device_classes=settings.device_classes
    )

