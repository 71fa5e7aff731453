"""FastAPI apps speaking kube-scheduler's extender protocol, and the bridge's health.

Bad bodies get a 400 naming the problem; Slurm or Kubernetes trouble is
reported per pod in the protocol's own fields, never as a 5xx.  The protocol
app is served over mutual TLS (extender/server.py); the health app (probes,
metrics) over plain HTTP on its own port.
"""

import time
from typing import Any, TypeVar

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from lightkube.core.exceptions import ApiError
from prometheus_client import make_asgi_app
from pydantic import ValidationError

from bridge import metrics
from bridge.binding.binder import BindError
from bridge.placement.eligibility import PodUnreadable, UnverifiedPod, pod_from_api
from bridge.placement.outcomes import Outcome, PlacementError, Verdict
from bridge.runtime import Bridge
from bridge.slurm.errors import SlurmError
from extender.wire import (
    ExtenderArgs,
    ExtenderBindingArgs,
    ExtenderBindingResult,
    ExtenderFilterResult,
    HostPriority,
    NodeList,
    PodMeta,
    filter_result_json,
)

log = structlog.get_logger(__name__)

MAX_SCORE = 10


class BadPod(ValueError):
    pass


Args = TypeVar("Args", ExtenderArgs, ExtenderBindingArgs)


async def _args(request: Request, model: type[Args]) -> Args:
    """The body parsed straight from its bytes into the wire model (400 when it is not one):
    no intermediate dicts of the whole pod and node list (B3)."""
    try:
        return model.model_validate_json(await request.body())
    except ValidationError as exc:
        raise RequestValidationError(exc.errors()) from exc


def _pod(args: ExtenderArgs) -> PodMeta:
    meta = args.pod.metadata
    if meta is None or not (meta.uid and meta.name and meta.namespace):
        raise BadPod("Pod needs metadata.uid, metadata.name and metadata.namespace")
    return meta


def _name(node: dict[str, Any]) -> str:
    return str((node.get("metadata") or {}).get("name", ""))


def create_app(bridge: Bridge) -> FastAPI:
    """filter, prioritize and bind over ``bridge``, which its server starts and stops
    (extender/server.py: a signal while it starts stops it)."""
    app = FastAPI(title="slurmbridge scheduler extender")

    @app.exception_handler(RequestValidationError)
    async def bad_body(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"Error": f"malformed request: {exc.errors()[:3]}"}, status_code=400)

    @app.exception_handler(BadPod)
    async def bad_pod(_: Request, exc: BadPod) -> JSONResponse:
        return JSONResponse({"Error": str(exc)}, status_code=400)

    @app.post("/filter", response_model=ExtenderFilterResult)
    async def filter_(request: Request) -> Response:
        answer = await _filter(bridge, await _args(request, ExtenderArgs))
        return Response(answer, media_type="application/json")

    @app.post("/prioritize", response_model_by_alias=True)
    async def prioritize(request: Request) -> list[HostPriority]:
        return _prioritize(bridge, await _args(request, ExtenderArgs))

    @app.post("/bind", response_model_by_alias=True)
    async def bind(request: Request) -> ExtenderBindingResult:
        return await _bind(bridge, await _args(request, ExtenderBindingArgs))

    return app


async def _filter(bridge: Bridge, args: ExtenderArgs) -> bytes:
    """The ExtenderFilterResult as JSON bytes."""
    started = time.perf_counter()
    claimed = _pod(args)
    candidates = args.candidates()
    verdict = _known_verdict(bridge, claimed, candidates)
    if verdict is None:
        assert claimed.namespace and claimed.name and claimed.uid  # _pod checked them
        try:  # never act on the body: the API server's copy of the pod it names
            pod = await pod_from_api(bridge.kube, claimed.namespace, claimed.name, claimed.uid)
        except (UnverifiedPod, PodUnreadable) as exc:
            return _unverified(claimed, candidates, exc)
        verdict = await bridge.placer.filter(pod, candidates)
    elapsed = time.perf_counter() - started
    metrics.FILTER_SECONDS.observe(elapsed)
    log.debug(
        "extender.filter", pod=f"{claimed.namespace}/{claimed.name}", keep=verdict.keep,
        why=verdict.message, ms=round(elapsed * 1000, 2),
    )
    if args.node_names is None and args.nodes is not None:
        kept = [n for n in args.nodes.items if _name(n) in verdict.keep]
        result = ExtenderFilterResult(
            nodes=NodeList(items=kept), failed_and_unresolvable=verdict.unresolvable
        )
        return result.model_dump_json(by_alias=True).encode()
    return filter_result_json(verdict.keep, verdict.failed(), verdict.reason)


def _known_verdict(bridge: Bridge, claimed: PodMeta, candidates: list[str]) -> Verdict | None:
    """From the pod cache (the API server's copy, as its watch delivered it) when it holds
    this pod at least as new as the version kube-scheduler saw; None: read the pod."""
    assert claimed.uid
    view = bridge.pod_cache.get(claimed.uid)
    if view is None or (view.namespace, view.name) != (claimed.namespace, claimed.name):
        return None
    if view.resource_version < claimed.version:
        return None
    return bridge.placer.filter_known(view, candidates)


def _unverified(
    claimed: PodMeta, candidates: list[str], exc: UnverifiedPod | PodUnreadable
) -> bytes:
    unverified = isinstance(exc, UnverifiedPod)
    outcome = Outcome.REFUSED if unverified else Outcome.PENDING
    metrics.FILTER_DECISIONS.labels(outcome.metric_label).inc()
    if unverified:
        log.warning("extender.unverified_pod", pod=f"{claimed.namespace}/{claimed.name}",
                    why=str(exc))
    message = str(exc) if unverified else f"waiting: cannot read the pod: {exc}"
    return filter_result_json([], candidates, message)


def _prioritize(bridge: Bridge, args: ExtenderArgs) -> list[HostPriority]:
    """From memory only: filter verified the pod and kept Slurm's node; an unknown UID
    gets no preference and causes no reads or writes."""
    uid = _pod(args).uid
    assert uid
    known = bridge.placer.known_placement(uid)
    chosen = known.kube_node if known else ""
    return [HostPriority(host=n, score=MAX_SCORE if n == chosen else 0) for n in args.candidates()]


async def _bind(bridge: Bridge, args: ExtenderBindingArgs) -> ExtenderBindingResult:
    pod = f"{args.pod_namespace}/{args.pod_name}"
    try:
        await bridge.binder.bind(args.pod_namespace, args.pod_name, args.pod_uid, args.node)
    except (BindError, PlacementError, SlurmError) as exc:
        metrics.BIND_FAILURES.inc()
        log.warning("extender.bind_refused", pod=pod, error=str(exc))
        return ExtenderBindingResult(error=str(exc))
    except ApiError as exc:
        metrics.BIND_FAILURES.inc()
        return ExtenderBindingResult(error=f"apiserver: {exc.status.message}")
    except Exception as exc:  # the apiserver unreachable, or a bug: answer, don't 500
        metrics.BIND_FAILURES.inc()
        log.exception("extender.bind_failed", pod=pod)
        return ExtenderBindingResult(error=f"bind failed: {exc!r}")
    return ExtenderBindingResult()


def create_health_app(bridge: Bridge) -> FastAPI:
    """Liveness, readiness and metrics: what probes and Prometheus read, nothing that acts."""
    app = FastAPI(title="slurmbridge extender health", docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.mount("/metrics", make_asgi_app())

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        slurm = "reachable" if bridge.slurm_reachable else "unreachable"
        if bridge.ready:
            return JSONResponse({"status": "ready", "slurm": slurm})
        return JSONResponse({"status": bridge.unready_reason, "slurm": slurm}, status_code=503)

    return app
