"""The bridge's Kubernetes client: lightkube's async client, its exchanges over aiohttp."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from lightkube import ConfigError, KubeConfig
from lightkube.config.client_adapter import verify_cluster

from bridge.kube.podwrites import BridgeClient
from bridge.kube.transport import AiohttpTransport

FIELD_MANAGER = "slurmbridge"


def kube_client(kubeconfig: Path | None) -> BridgeClient:
    """From a kubeconfig file when given, else in-cluster / $KUBECONFIG as kubectl does."""
    return client_for(KubeConfig.from_file(kubeconfig) if kubeconfig else KubeConfig.from_env())


@asynccontextmanager
async def opened_kube(kubeconfig: Path | None) -> AsyncIterator[BridgeClient]:
    """A client for one CLI command, closed on the way out: an aiohttp session left open at
    exit prints "Unclosed client session" over the command's output."""
    kube = kube_client(kubeconfig)
    try:
        yield kube
    finally:
        await kube.close()


def client_for(kubeconfig: KubeConfig) -> BridgeClient:
    config = kubeconfig.get()
    if config is None or config.user is None:
        raise ConfigError("the kubeconfig names no current context with a user: set one "
                         "(kubectl config use-context)")
    # The same TLS lightkube would set up: the cluster's CA (or none), the user's certificate.
    tls = verify_cluster(config.cluster, config.user, config.abs_file)
    return BridgeClient(config, AiohttpTransport(tls), field_manager=FIELD_MANAGER)
