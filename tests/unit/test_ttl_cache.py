"""The webhook's TTL cache: answers expire, a burst of misses shares one fetch, and a failed
fetch is retried by the next review rather than kept."""

import asyncio

import pytest

from admission.ttl_cache import TtlCache


class Source:
    """An apiserver read: counts fetches; holds each answer until ``release`` is set."""

    def __init__(self, *, fail: int = 0) -> None:
        self.fetches = 0
        self.fail = fail  # how many fetches fail first
        self.release = asyncio.Event()
        self.release.set()

    async def __call__(self) -> str:
        self.fetches += 1
        await self.release.wait()
        if self.fetches <= self.fail:
            raise ConnectionError("apiserver unreachable")
        return f"answer {self.fetches}"


async def test_an_answer_is_kept_ttl_seconds_from_when_it_was_asked() -> None:
    now = [0.0]
    cache = TtlCache[str, str](2.0, clock=lambda: now[0])
    source = Source()
    assert await cache.get("k", source) == "answer 1"
    now[0] = 1.9
    assert await cache.get("k", source) == "answer 1"
    now[0] = 2.0
    assert await cache.get("k", source) == "answer 2"
    assert source.fetches == 2


async def test_keys_are_kept_apart_and_expired_ones_forgotten() -> None:
    now = [0.0]
    cache = TtlCache[str, str](2.0, clock=lambda: now[0])
    a, b = Source(), Source()
    await cache.get("a", a)
    now[0] = 1.0
    await cache.get("b", b)
    now[0] = 2.5  # a expired, b not
    await cache.get("b", b)
    assert (a.fetches, b.fetches) == (1, 1)
    assert list(cache._kept) == ["b"]  # the expired answer is not held on to


async def test_concurrent_misses_for_one_key_share_one_fetch() -> None:
    cache = TtlCache[str, str](2.0)
    source = Source()
    source.release.clear()
    reviews = [asyncio.create_task(cache.get("k", source)) for _ in range(5)]
    await asyncio.sleep(0)
    source.release.set()
    assert await asyncio.gather(*reviews) == ["answer 1"] * 5
    assert source.fetches == 1


async def test_a_failed_fetch_fails_its_waiters_and_is_not_kept() -> None:
    cache = TtlCache[str, str](60.0)
    source = Source(fail=1)
    source.release.clear()
    reviews = [asyncio.create_task(cache.get("k", source)) for _ in range(3)]
    await asyncio.sleep(0)
    source.release.set()
    results = await asyncio.gather(*reviews, return_exceptions=True)
    assert [type(r) for r in results] == [ConnectionError] * 3 and source.fetches == 1
    assert await cache.get("k", source) == "answer 2"  # the next review fetches again


async def test_a_review_given_up_leaves_the_fetch_to_the_others() -> None:
    cache = TtlCache[str, str](60.0)
    source = Source()
    source.release.clear()
    first = asyncio.create_task(cache.get("k", source))
    second = asyncio.create_task(cache.get("k", source))
    await asyncio.sleep(0)
    first.cancel()
    source.release.set()
    assert await second == "answer 1"
    with pytest.raises(asyncio.CancelledError):
        await first
    assert await cache.get("k", source) == "answer 1" and source.fetches == 1
