"""Which pods the bridge places: asked for by name, or living in an enrolled namespace."""

import time
from collections.abc import Awaitable, Callable, Mapping

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Namespace

from admission.pod import PodShape
from admission.ttl_cache import TtlCache
from bridge import keys
from bridge.config import AdmissionSettings
from bridge.kube.apierrors import is_not_found

NamespaceLabels = Callable[[str], Awaitable[Mapping[str, str]]]
"""Async lookup of a namespace's labels (empty when the namespace does not exist)."""


class NamespaceLookupError(RuntimeError):
    """The labels of a namespace could not be read (API unreachable, RBAC)."""


def kube_namespace_labels(client: AsyncClient) -> NamespaceLabels:
    """A lookup reading labels from the API server through ``client``."""

    async def lookup(name: str) -> Mapping[str, str]:
        try:
            namespace = await client.get(Namespace, name)
        except ApiError as err:
            if is_not_found(err):
                return {}
            raise NamespaceLookupError(f"reading namespace {name!r}: {err}") from err
        except Exception as err:  # connection refused, timeout, ...: report, never crash
            raise NamespaceLookupError(f"reading namespace {name!r}: {err}") from err
        return (namespace.metadata.labels if namespace.metadata else None) or {}

    return lookup


class CachedNamespaceLabels:
    """Keep labels for ``ttl`` seconds: every pod creation must not cost an API round trip.

    Errors are not cached, so a transient failure is retried on the next pod.
    """

    def __init__(
        self, lookup: NamespaceLabels, ttl: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._lookup = lookup
        self._kept = TtlCache[str, Mapping[str, str]](ttl, clock)

    async def __call__(self, name: str) -> Mapping[str, str]:
        return await self._kept.get(name, lambda: self._lookup(name))


class Scope:
    """Decides whether a pod is the bridge's to place."""

    def __init__(self, settings: AdmissionSettings, namespace_labels: NamespaceLabels) -> None:
        self._settings = settings
        self._labels = namespace_labels

    async def includes(self, namespace: str, pod: PodShape) -> bool:
        """In scope: asked for ``slurmbridge``, or in an enrolled namespace; never an excluded one.

        The label lookup comes last, so it only happens (and can only raise
        ``NamespaceLookupError``) for a pod that did not name the bridge itself.
        """
        if not namespace or namespace in self._settings.excluded_namespaces:
            return False
        if pod.spec.scheduler_name == keys.SCHEDULER_NAME:
            return True
        if namespace in self._settings.enrolled_namespaces:
            return True
        labels = await self._labels(namespace)
        return labels.get(keys.NAMESPACE_ENROLLED) == "true"
