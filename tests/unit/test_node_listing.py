"""Slurm's node table read again only when a node changed (bridge/slurm/node_listing.py):
the bridge's costliest steady call at a site (1,024 nodes: 0.4-0.5 s of slurmrestd each
round).  slurmrestd is mocked here with the answers the real ones gave (26.05: HTTP 304 to an
``update_time`` no node changed after; 24.11: HTTP 500 "Unable to query partitions");
tests/integration/test_slurm_client.py asks the real ones."""

import httpx
import pytest

from bridge.config import SlurmSettings
from bridge.slurm.client import SlurmClient
from bridge.slurm.errors import SlurmRejected
from bridge.slurm.node_listing import SlurmNodeListing
from slurmbridge_devkit.slurm_http import MOCK_SLURM_URL, HttpxExchange


class Slurmrestd:
    """One slurmctld's node table behind a slurmrestd: ``clock`` is slurmctld's time in whole
    seconds, ``changed`` when a node last changed; ``answers_changes``: 26.05's 304, else
    24.11's HTTP 500."""

    def __init__(self, *, answers_changes: bool = True) -> None:
        self.clock, self.changed = 100, 90
        self.reason = ""
        self.answers_changes = answers_changes
        self.controller_up = True
        self.asked: list[str | None] = []  # each GET /nodes/'s update_time (None: in full)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/openapi/v3":
            return httpx.Response(200, json={"paths": {"/slurm/v0.0.44/jobs/": {}}})
        since = request.url.params.get("update_time")
        self.asked.append(since)
        if not self.controller_up:
            return httpx.Response(500, json={"errors": [{
                "error_number": 1007, "error": "Unable to contact slurm controller"}]})
        if since is not None and not self.answers_changes:
            return httpx.Response(500, json={"errors": [{
                "error_number": -1, "error": "Unspecified error",
                "description": "Unable to query partitions"}]})
        if since is not None and int(since) >= self.changed:  # the laxer of the two forms
            return httpx.Response(304)
        node = {"name": "node1", "state": ["IDLE"] + (["DRAIN"] if self.reason else []),
                "reason": self.reason, "cpus": 8, "real_memory": 1000, "gres": ""}
        return httpx.Response(200, json={
            "nodes": [node], "last_update": {"set": True, "number": self.clock}})

    def drain(self, reason: str) -> None:
        self.reason, self.changed = reason, self.clock


def _client(rest: Slurmrestd) -> SlurmClient:
    settings = SlurmSettings(url=MOCK_SLURM_URL, user="slurm", token="t", retries=0)
    return SlurmClient(settings, exchange=HttpxExchange.mock(rest))


async def test_an_unchanged_table_is_not_listed_again_and_a_change_is_seen_at_once() -> None:
    rest = Slurmrestd()
    async with _client(rest) as client:
        listing = SlurmNodeListing(client)
        first = await listing.refresh()
        rest.clock += 2
        again = await listing.refresh()
        assert again == first and rest.asked == [None, "99"]  # 304: the table held
        rest.drain("admin: fan")  # in the same second as the answer before: may follow it
        rest.clock += 2
        [drained] = await listing.refresh()
    assert "DRAIN" in drained.states and drained.reason == "admin: fan"
    assert rest.asked == [None, "99", "99"]


async def test_a_change_in_the_same_second_as_the_table_is_not_missed() -> None:
    """slurmctld's clock has whole seconds: a node changing in the second that answered may
    have changed after the answer, so the question starts a second earlier."""
    rest = Slurmrestd()
    async with _client(rest) as client:
        listing = SlurmNodeListing(client)
        await listing.refresh()
        rest.drain("admin: same second")  # changed == clock == the table's read_at
        [node] = await listing.refresh()
    assert node.reason == "admin: same second"


async def test_a_slurmrestd_that_cannot_answer_changes_is_listed_in_full_and_not_asked_again(
) -> None:
    rest = Slurmrestd(answers_changes=False)  # Slurm 24.11
    async with _client(rest) as client:
        listing = SlurmNodeListing(client)
        for _ in range(3):
            [node] = await listing.refresh()
            assert node.name == "node1"
    assert rest.asked == [None, "99", None, None]


async def test_an_outage_is_an_error_and_the_question_is_asked_again_after_it() -> None:
    rest = Slurmrestd()
    async with _client(rest) as client:
        listing = SlurmNodeListing(client)
        await listing.refresh()
        rest.controller_up = False
        with pytest.raises(SlurmRejected, match="Unable to contact slurm controller"):
            await listing.refresh()
        rest.controller_up = True
        await listing.refresh()
    assert rest.asked == [None, "99", None, "99"]  # still asked "changed since?" after


async def test_the_table_is_listed_in_full_once_older_than_max_age() -> None:
    rest = Slurmrestd()
    async with _client(rest) as client:
        listing = SlurmNodeListing(client, max_age=0)
        await listing.refresh()
        await listing.refresh()
    assert rest.asked == [None, None]


async def test_an_empty_answer_to_changed_since_is_not_taken_for_every_node_gone() -> None:
    """A slurmrestd that says "unchanged" with an empty list (a form no tested version uses,
    but an older handler's "nothing to do" reads so) must not empty the bridge's table."""

    class EmptyWhenUnchanged(Slurmrestd):
        def __call__(self, request: httpx.Request) -> httpx.Response:
            if request.url.params.get("update_time") is not None:
                self.asked.append(request.url.params["update_time"])
                return httpx.Response(200, json={"nodes": [], "last_update": {"number": 0}})
            return super().__call__(request)

    rest = EmptyWhenUnchanged()
    async with _client(rest) as client:
        listing = SlurmNodeListing(client)
        for _ in range(3):
            [node] = await listing.refresh()
            assert node.name == "node1"
    assert rest.asked == [None, "99", None, None]  # asked once, then listed in full
