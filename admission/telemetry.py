"""The webhook's ``/metrics``: reviews by webhook, operation and outcome, refusals by HTTP code,
latency, and the build.

A registry of its own: the webhook process holds the extender's metrics too (one package), and
a webhook replica showing ``slurmbridge_slurm_reachable 0`` would raise the Slurm alert.  Label
values come from small fixed sets, never a pod's or a namespace's name.
"""

import time

from fastapi import FastAPI, Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from admission.review import AdmissionResponse
from bridge import metrics

REGISTRY = CollectorRegistry()
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)
GCCollector(registry=REGISTRY)
REGISTRY.register(metrics.BUILD_INFO)

REQUESTS = Counter(
    "slurmbridge_webhook_requests_total",
    "admission reviews by webhook (admit, mutate, validate), operation (CREATE, UPDATE, DELETE, "
    "CONNECT; unknown for an unreadable body) and outcome (allowed, patched, refused, unreadable)",
    ["webhook", "operation", "outcome"], registry=REGISTRY,
)
REFUSALS = Counter(
    "slurmbridge_webhook_refusals_total",
    "pods refused by webhook and HTTP code: 403 policy or tenancy, 422 a pod Slurm cannot run, "
    "503 a lookup failed (the creator retries)",
    ["webhook", "code"], registry=REGISTRY,
)
SECONDS = Histogram(
    "slurmbridge_webhook_request_seconds",
    "admission review latency by webhook (the API server waits for it on every pod write)",
    ["webhook"], registry=REGISTRY,
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
TLS_HANDSHAKES = Counter(
    "slurmbridge_webhook_tls_handshakes_total",
    "TLS handshakes, counted as the client connections reviews come on (each new client "
    "address and port; the server's TLS is in Rust, out of Python's sight): one per connection "
    "the API server opens (a rate that follows the pods created means its connections churn)",
    registry=REGISTRY,
)
_TIMED = {"/admit": "admit", "/mutate": "mutate", "/validate": "validate"}
for _webhook in _TIMED.values():  # at 0 from the start: rate() counts the first refusal too
    for _code in ("403", "422", "503"):
        REFUSALS.labels(_webhook, _code)


def webhook_app() -> FastAPI:
    """The webhook's app, without docs pages: ``/metrics`` served, every review timed."""
    app = FastAPI(title="slurmbridge admission", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(_Timed)

    @app.get("/metrics")
    async def scrape() -> Response:
        return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)

    return app


def answered(webhook: str, operation: str, response: AdmissionResponse) -> None:
    if not response.allowed:
        outcome = "refused"
        REFUSALS.labels(webhook, str(response.status.code if response.status else 0)).inc()
    else:
        outcome = "patched" if response.patch else "allowed"
    REQUESTS.labels(webhook, operation, outcome).inc()


class _Timed:
    """ASGI middleware: each review's time, from its request to the end of its answer; a body
    that is no AdmissionReview about a pod (answered 400) counted as unreadable."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        webhook = _TIMED.get(scope["path"]) if scope["type"] == "http" else None
        if webhook is None:
            await self.app(scope, receive, send)
            return

        async def answering(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 400:
                REQUESTS.labels(webhook, "unknown", "unreadable").inc()
            await send(message)

        started = time.perf_counter()
        try:
            await self.app(scope, receive, answering)
        finally:
            SECONDS.labels(webhook).observe(time.perf_counter() - started)
