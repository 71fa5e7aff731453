"""One kind of object kept current by list + watch: the base of the pod and node caches.

List, then watch from the listing's resourceVersion, so no change is missed between the
two; start over from a fresh listing whenever the watch breaks (the apiserver restarted, or
answered 410 Gone for a resourceVersion it no longer holds: lightkube restarts a watch the
apiserver closed from the last version it saw, which etcd may have compacted after a quiet
spell), which also drops the objects that went away while no watch ran.  No bookmarks:
lightkube decodes a bookmark as the whole object, which a Pod's fails (``spec.containers``
null), so each one would break the watch and relist every pod (B1 saw one a minute).
A subclass says which objects (kind, field selector) and what small view of each it keeps;
an older copy than the one held changes nothing.
"""

import asyncio
from abc import ABC, abstractmethod
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import structlog
from lightkube.core.client import FieldSelector

from bridge.ports import KubeList, KubeWatch

log = structlog.get_logger(__name__)

RETRY_SECONDS = 2.0


class Versioned(Protocol):
    @property
    def key(self) -> str: ...
    @property
    def resource_version(self) -> int: ...


V = TypeVar("V", bound=Versioned)


def resource_version(obj: Any) -> int:
    """An object's resourceVersion as a number (0 when absent): etcd's revision, so later
    writes compare greater, which the caches rely on to tell a stale copy."""
    text = (obj.metadata.resourceVersion if obj.metadata else None) or ""
    return int(text) if text.isdigit() else 0


class WatchedKube(KubeList, KubeWatch, Protocol):
    """Listed, then watched from the listing's resourceVersion."""


class WatchCache(ABC, Generic[V]):
    resource: ClassVar[Any]  # the lightkube resource watched
    selection: ClassVar[FieldSelector | None] = None  # its field selector
    namespaced: ClassVar[bool] = True  # watched in every namespace

    def __init__(self, kube: WatchedKube) -> None:
        self._kube = kube
        self._items: dict[str, V] = {}
        self._synced = asyncio.Event()  # the current watch has delivered its initial listing

    @abstractmethod
    def view(self, obj: Any) -> V | None:
        """The view kept of ``obj``; None for an object not worth keeping."""

    def get(self, key: str) -> V | None:
        return self._items.get(key)

    def views(self) -> list[V]:
        return list(self._items.values())

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    async def wait_synced(self) -> None:
        await self._synced.wait()

    async def current(self) -> list[V]:
        """The objects as of now: the watch's copy while it runs, else one fresh listing."""
        if self._synced.is_set():
            return self.views()
        return [v async for obj in self._list() if (v := self.view(obj)) is not None]

    async def run(self) -> None:
        while True:
            try:
                await self._watch()
            except Exception as exc:  # apiserver away, or the watch expired: relist
                log.warning("watchcache.watch_failed", kind=self.resource.__name__,
                            error=repr(exc), retry_in=RETRY_SECONDS)
            self._synced.clear()
            await asyncio.sleep(RETRY_SECONDS)

    async def _watch(self) -> None:
        self.relisting()
        listing = self._list()
        items: dict[str, V] = {}
        async for obj in listing:
            self.passing("ADDED", obj)
            if (view := self.view(obj)) is not None:
                items[view.key] = view
        self.replaced(items)
        self._synced.set()
        since = getattr(listing, "resourceVersion", None)
        watch = (
            self._kube.watch(self.resource, namespace="*", fields=self.selection,
                             resource_version=since)
            if self.namespaced
            else self._kube.watch(self.resource, fields=self.selection, resource_version=since)
        )
        async for event, obj in watch:
            self.apply(event, obj)

    def apply(self, event: str, obj: Any) -> None:
        """One watch event."""
        self.passing(event, obj)
        view = self.view(obj)
        if view is None:
            return
        if event == "DELETED":
            self.removed(view)
            return
        known = self._items.get(view.key)
        if known is None or known.resource_version <= view.resource_version:
            self.stored(view)

    # -- what a subclass may add to each step -----------------------------------------------

    def relisting(self) -> None:
        """A fresh listing starts: every object comes again (as ADDED), the gone ones not."""

    def passing(self, event: str, obj: Any) -> None:
        """Every object the listing or the watch brings, as it passes."""

    def replaced(self, items: dict[str, V]) -> None:
        self._items = items

    def stored(self, view: V) -> None:
        self._items[view.key] = view

    def removed(self, view: V) -> None:
        self._items.pop(view.key, None)

    def _list(self) -> Any:
        if self.namespaced:
            return self._kube.list(self.resource, namespace="*", fields=self.selection)
        return self._kube.list(self.resource, fields=self.selection)
