"""The bridge's Kubernetes client: lightkube's async client (httpx-based)."""

from pathlib import Path

from lightkube import AsyncClient, KubeConfig

FIELD_MANAGER = "slurmbridge"


def kube_client(kubeconfig: Path | None) -> AsyncClient:
    """From a kubeconfig file when given, else in-cluster / $KUBECONFIG as kubectl does."""
    config = KubeConfig.from_file(kubeconfig) if kubeconfig else KubeConfig.from_env()
    return AsyncClient(config=config, field_manager=FIELD_MANAGER)
