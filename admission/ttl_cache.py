"""The webhook's apiserver answers, kept ``ttl`` seconds: one fetch per key serves a burst.

A controller creates a workload's pods at once and the apiserver reviews them in parallel:
reviews missing the same key wait on one fetch, not one each.  A failed fetch is not kept (the
next review retries it), and a review given up (its request cancelled) leaves the fetch to the
others.  An answer counts from when it was asked for, so none is older than ``ttl``.
(cachetools' TTLCache would keep the answers but not share a fetch in flight, the part that
needs care; the expiry alone is a few lines.)
"""

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class TtlCache(Generic[K, V]):
    def __init__(self, ttl: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl = ttl
        self._clock = clock
        self._kept: dict[K, tuple[float, V]] = {}  # roughly in the order they were asked for
        self._fetching: dict[K, asyncio.Future[V]] = {}

    async def get(self, key: K, fetch: Callable[[], Awaitable[V]]) -> V:
        """The answer for ``key``: kept, being fetched, or fetched now by ``fetch()``."""
        now = self._clock()
        self._forget(now)
        kept = self._kept.get(key)
        if kept is not None and now - kept[0] < self._ttl:
            return kept[1]
        fetching = self._fetching.get(key)
        if fetching is None:
            fetching = self._fetching[key] = asyncio.ensure_future(fetch())
            fetching.add_done_callback(functools.partial(self._fetched, key, now))
        return await asyncio.shield(fetching)

    def _fetched(self, key: K, asked: float, done: asyncio.Future[V]) -> None:
        del self._fetching[key]
        # Reading the exception also keeps asyncio from reporting one no review waited for.
        if not done.cancelled() and done.exception() is None:
            self._kept.pop(key, None)
            self._kept[key] = (asked, done.result())

    def _forget(self, now: float) -> None:
        """Drop the expired answers from the oldest on, so the cache holds one ``ttl``'s worth."""
        while self._kept:
            key, (asked, _) = next(iter(self._kept.items()))
            if now - asked < self._ttl:
                return
            del self._kept[key]
