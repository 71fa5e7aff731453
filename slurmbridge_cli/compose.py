"""The composition root: the real Slurm and Kubernetes clients, handed to the bridge.

Everything below takes the ports of bridge/ports.py; this is the one place that decides
they are slurmrestd and the apiserver.  A test or an offline benchmark passes its fakes
(slurmbridge_devkit/fakes.py) for either and gets the same wiring otherwise.
"""

from bridge.config import Settings
from bridge.kube.connection import kube_client
from bridge.policy.tenancy import TenancySource, placeholder_trust
from bridge.ports import KubePort, SlurmPort
from bridge.runtime import Bridge
from bridge.slurm.client import SlurmClient


def build_bridge(
    settings: Settings, *, slurm: SlurmPort | None = None, kube: KubePort | None = None
) -> Bridge:
    """The bridge over slurmrestd and the apiserver of ``settings``, unless given others."""
    tenancy = TenancySource(settings.admission.tenancy_file)
    # Placeholders run as the namespaces' Slurm users: the tenancy says whose job is ours.
    return Bridge(
        settings, tenancy=tenancy,
        slurm=slurm or SlurmClient(settings.slurm, trust=placeholder_trust(tenancy)),
        kube=kube or kube_client(settings.kube.kubeconfig),
    )
