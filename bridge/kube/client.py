"""The bridge's Kubernetes client: lightkube's async client, its exchanges over aiohttp."""

from pathlib import Path

from lightkube import AsyncClient, KubeConfig
from lightkube.config.client_adapter import verify_cluster

from bridge.kube.transport import AiohttpTransport

FIELD_MANAGER = "slurmbridge"


def kube_client(kubeconfig: Path | None) -> AsyncClient:
    """From a kubeconfig file when given, else in-cluster / $KUBECONFIG as kubectl does."""
    return client_for(KubeConfig.from_file(kubeconfig) if kubeconfig else KubeConfig.from_env())


def client_for(kubeconfig: KubeConfig) -> AsyncClient:
    config = kubeconfig.get()
    if config is None or config.user is None:
        raise ValueError("the kubeconfig names no current context with a user: set one "
                         "(kubectl config use-context)")
    # The same TLS lightkube would set up: the cluster's CA (or none), the user's certificate.
    tls = verify_cluster(config.cluster, config.user, config.abs_file)
    return AsyncClient(
        config=config, field_manager=FIELD_MANAGER, transport=AiohttpTransport(tls)
    )
