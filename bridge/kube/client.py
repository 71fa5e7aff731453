"""The bridge's Kubernetes client: lightkube's async client, its exchanges over aiohttp, its
watches with bookmarks."""

from pathlib import Path
from typing import Any, cast

from lightkube import AsyncClient, KubeConfig
from lightkube.config.client_adapter import verify_cluster
from lightkube.core.client import FieldSelector, LabelSelector
from lightkube.core.selector import build_selector
from lightkube.types import OnErrorHandler, on_error_raise

from bridge.kube.transport import AiohttpTransport

FIELD_MANAGER = "slurmbridge"


class BridgeClient(AsyncClient):
    def watch(
        self, res: Any, *, namespace: str | None = None, labels: LabelSelector | None = None,
        fields: FieldSelector | None = None, server_timeout: int | None = None,
        resource_version: str | None = None, on_error: OnErrorHandler = on_error_raise,
    ) -> Any:
        """lightkube's watch, asking for bookmarks: a watch of objects that rarely change
        (Nodes, the bridge's pods on a quiet day) is restarted by lightkube from the last
        version it saw; with bookmarks that is where the apiserver was a minute ago, not a
        version etcd has compacted since (410 Gone, then a relisting of every object)."""
        request = self._client.prepare_request(
            "list", res=res, namespace=namespace, watch=True,
            params={
                "timeoutSeconds": server_timeout,
                "resourceVersion": resource_version,
                "allowWatchBookmarks": "true",
                "labelSelector": build_selector(labels) if labels else None,
                "fieldSelector": (
                    build_selector(cast(Any, fields), for_fields=True) if fields else None
                ),
            },
        )
        return self._client.watch(request, on_error=on_error)


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
    return BridgeClient(
        config=config, field_manager=FIELD_MANAGER, transport=AiohttpTransport(tls)
    )
