"""The webhook's /metrics: reviews counted by webhook, operation and outcome, refusals by code,
a latency histogram, the build; label values from small fixed sets (never a pod's or a
namespace's name), and none of the extender's series (the webhook never talks to Slurm: a
``slurmbridge_slurm_reachable`` of 0 there would raise the Slurm-unreachable alert)."""

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from admission.webhook import create_app
from bridge import keys
from tests.unit.test_admission import OPEN, SETTINGS, lookups, make_pod, make_review

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture
async def webhook() -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(SETTINGS, lookups(), tenancy=OPEN)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://webhook") as client:
        yield client


async def scrape(client: httpx.AsyncClient) -> Samples:
    reply = await client.get("/metrics")
    assert reply.status_code == 200, reply.text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(reply.text) for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


async def review(client: httpx.AsyncClient, endpoint: str, body: Any) -> None:
    await client.post(f"/{endpoint}", json=body)


async def test_reviews_are_counted_by_webhook_operation_and_outcome(
    webhook: httpx.AsyncClient
) -> None:
    before = await scrape(webhook)
    refused = make_pod(name="refused-pod", annotations={keys.ACCOUNT: "bio", keys.QOS: "normal"})
    await review(webhook, "validate", make_review(refused))
    await review(webhook, "validate", make_review(make_pod(
        annotations={keys.ACCOUNT: "physics", keys.QOS: "normal"})))
    await review(webhook, "mutate", make_review(make_pod()))
    await review(webhook, "mutate", {"not": "a review"})
    await review(webhook, "admit", make_review(refused))  # a created pod's one review
    await review(webhook, "admit", make_review(make_pod(
        annotations={keys.ACCOUNT: "physics", keys.QOS: "normal"})))
    after = await scrape(webhook)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    requests = "slurmbridge_webhook_requests_total"
    assert delta(requests, webhook="validate", operation="CREATE", outcome="refused") == 1
    assert delta(requests, webhook="validate", operation="CREATE", outcome="allowed") == 1
    assert delta(requests, webhook="mutate", operation="CREATE", outcome="patched") == 1
    assert delta(requests, webhook="mutate", operation="unknown", outcome="unreadable") == 1
    assert delta("slurmbridge_webhook_refusals_total", webhook="validate", code="403") == 1
    assert delta("slurmbridge_webhook_request_seconds_count", webhook="validate") == 2
    assert delta("slurmbridge_webhook_request_seconds_count", webhook="mutate") == 2
    assert value(after, "slurmbridge_webhook_request_seconds_bucket", webhook="mutate",
                 le="+Inf") >= 2
    assert delta(requests, webhook="admit", operation="CREATE", outcome="refused") == 1
    assert delta(requests, webhook="admit", operation="CREATE", outcome="patched") == 1
    assert delta("slurmbridge_webhook_refusals_total", webhook="admit", code="403") == 1
    assert delta("slurmbridge_webhook_request_seconds_count", webhook="admit") == 2

    names = {name for name, _ in after}
    assert any(n.startswith("slurmbridge_build_info") for n in names)
    assert "slurmbridge_slurm_reachable" not in names, "the extender's series on the webhook"
    label_values = {v for name, labels in after for _, v in labels
                    if name.startswith("slurmbridge_webhook_")}
    assert not label_values & {"refused-pod", "train", "team-a", "team-a/refused-pod"}


async def test_a_deletion_is_counted_as_allowed(webhook: httpx.AsyncClient) -> None:
    before = await scrape(webhook)
    await review(webhook, "validate", make_review(None, operation="DELETE", old=make_pod()))
    after = await scrape(webhook)
    labels = {"webhook": "validate", "operation": "DELETE", "outcome": "allowed"}
    name = "slurmbridge_webhook_requests_total"
    assert value(after, name, **labels) - value(before, name, **labels) == 1
