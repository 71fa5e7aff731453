"""The webhook HTTP service: AdmissionReview v1 in and out, over HTTPS only.

A body that is not an AdmissionReview about a pod gets a 400 with the reason:
the API server then applies the webhook's failurePolicy instead of guessing.
Deciding has no side effects (register with ``sideEffects: None``), so a
``dryRun`` request gets exactly the answer a real one would.

Three paths: ``/mutate`` hands a new pod to Slurm, ``/validate`` refuses what the bridge
cannot honour, ``/admit`` does both for a new pod in one review, checking the pod as mutated:
one AdmissionReview per created pod instead of two wherever the chart points the mutating
webhook at it (``webhook.validateCreates``; ``/validate`` then sees the updates only).
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import jsonpatch
import msgspec
import structlog
import uvloop
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

from admission import ephemeral, mutate, telemetry, validate, workloads
from admission.dra import claimed_gpus, extended_gpu_resources
from admission.lookups import Lookups
from admission.owners import WorkloadError, WorkloadLookupError
from admission.pod import PodShape
from admission.review import AdmissionRequest, AdmissionResponse, decode_request, encode_response
from admission.scope import CachedNamespaceLabels, NamespaceLookupError, Scope
from bridge.config import AdmissionSettings, DeviceClassGres
from bridge.devices.asks import UnmappableClaim
from bridge.draining import DrainingServer, ServerConfig, https_config
from bridge.jobs.translate import job_request_for_pod
from bridge.policy.tenancy import TenancySource

log = structlog.get_logger(__name__)

Endpoint = Literal["admit", "mutate", "validate"]


class BadReview(ValueError):
    """The body cannot be reviewed; the message says why (answered with HTTP 400)."""


class TLSConfigError(ValueError):
    """The webhook was asked to start without usable TLS material."""


@dataclass(frozen=True, slots=True)
class _Context:
    """What every review is decided with."""

    settings: AdmissionSettings
    scope: Scope
    translate: validate.PodTranslator
    tenancy: TenancySource
    lookups: Lookups
    device_classes: Mapping[str, DeviceClassGres]


def create_app(
    settings: AdmissionSettings,
    lookups: Lookups,
    translate: validate.PodTranslator = job_request_for_pod,
    tenancy: TenancySource | None = None,
    *,
    device_classes: Mapping[str, DeviceClassGres] | None = None,
) -> FastAPI:
    """The webhook app reading the API server through ``lookups`` (a namespace's labels kept
    ``settings.namespace_cache_ttl_seconds``); ``tenancy`` defaults to the file
    ``settings.tenancy_file``; ``device_classes``: the DRA classes Slurm allocates."""
    labels = CachedNamespaceLabels(lookups.namespace_labels, settings.namespace_cache_ttl_seconds)
    context = _Context(
        settings, Scope(settings, labels), translate,
        tenancy or TenancySource(settings.tenancy_file), lookups, device_classes or {},
    )
    app = telemetry.webhook_app()  # /metrics, and each review timed

    async def review(endpoint: Endpoint, http: Request) -> Response:
        try:
            request = _parse(await http.body())
            response = await _decide(endpoint, request, context)
        except BadReview as err:
            log.warning("admission.bad_review", endpoint=endpoint, reason=str(err))
            return JSONResponse({"error": str(err)}, status_code=400)
        _log_review(endpoint, request, response)
        return Response(encode_response(response), media_type="application/json")

    @app.post("/admit")
    async def admit_endpoint(http: Request) -> Response:
        return await review("admit", http)

    @app.post("/mutate")
    async def mutate_endpoint(http: Request) -> Response:
        return await review("mutate", http)

    @app.post("/validate")
    async def validate_endpoint(http: Request) -> Response:
        return await review("validate", http)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app


def _log_review(endpoint: Endpoint, request: AdmissionRequest, response: AdmissionResponse) -> None:
    log.info(
        "admission.review",
        endpoint=endpoint,
        uid=request.uid,
        pod=f"{request.namespace}/{request.name}",
        operation=request.operation,
        user=request.user_info.username,
        dry_run=request.dry_run,
        allowed=response.allowed,
        reason=response.status.message if response.status else None,
        patched=response.patch is not None,
    )
    telemetry.answered(endpoint, request.operation, response)


def _parse(body: bytes) -> AdmissionRequest:
    try:
        request = decode_request(body)
    except msgspec.DecodeError as err:
        raise BadReview(f"not an AdmissionReview v1: {err}") from None
    if request is None:
        raise BadReview("not an AdmissionReview v1: request is missing")
    return request


def _pod(raw: object, field: str) -> PodShape:
    try:
        return PodShape.model_validate(raw)
    except ValidationError as err:
        raise BadReview(f"request.{field} is not a Pod: {_describe(err)}") from None


def _describe(err: ValidationError, limit: int = 3) -> str:
    problems = [
        f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in err.errors()[:limit]
    ]
    more = err.error_count() - limit
    return "; ".join(problems) + (f" (and {more} more)" if more > 0 else "")


async def _decide(endpoint: Endpoint, request: AdmissionRequest, context: _Context
                  ) -> AdmissionResponse:
    """One review's answer."""
    if (request.resource.group, request.resource.resource) != ("", "pods"):
        raise BadReview(f"this webhook only reviews pods, got {request.resource.resource!r}")
    if request.sub_resource == "ephemeralcontainers" and request.operation == "UPDATE":
        return _ephemeral(endpoint, request)
    # Other sub-resources (binding, status, eviction: the bridge's own business; resize: CPU
    # and memory only) and deletions.
    if request.sub_resource or request.operation not in ("CREATE", "UPDATE"):
        return AdmissionResponse.allow(request.uid)
    pod = _pod(request.object, "object")
    old = _pod(request.old_object, "oldObject") if request.operation == "UPDATE" else None
    try:
        in_scope = await context.scope.includes(request.namespace, pod)
    except NamespaceLookupError as err:
        log.error("admission.namespace_lookup_failed", uid=request.uid, reason=str(err))
        warning = f"slurmbridge could not check whether this namespace is enrolled: {err}"
        return AdmissionResponse.allow(request.uid, warnings=[warning])
    if not in_scope:
        return AdmissionResponse.allow(request.uid)
    if endpoint == "validate":
        return await _checked(request, pod, old, context)
    if old is not None:  # a pod's spec is (nearly) immutable: mutate on creation only
        return AdmissionResponse.allow(request.uid)
    patch = await _mutation(request, pod, context)
    if isinstance(patch, AdmissionResponse):  # refused
        return patch
    if endpoint == "mutate":
        return AdmissionResponse.allow(request.uid, patch=patch)
    stored = _as_stored(jsonpatch.apply_patch(request.object or {}, patch), request)
    mutated = msgspec.structs.replace(request, object=stored)
    verdict = await _checked(mutated, _pod(stored, "object"), None, context)
    return AdmissionResponse.allow(request.uid, patch=patch, warnings=verdict.warnings) \
        if verdict.allowed else verdict


def _as_stored(pod: dict[str, Any], request: AdmissionRequest) -> dict[str, Any]:
    """The created pod as the validating webhook would see it: the API server gives it its UID
    and, under ``generateName``, its name only after the mutating webhooks (a Job's pods have
    neither here), so stand-ins of their shape take their place: the checks need them present
    (the job's name and owner), not their values."""
    meta = pod.setdefault("metadata", {})
    meta["uid"] = meta.get("uid") or request.uid
    meta["name"] = meta.get("name") or request.name or f"{meta.get('generateName') or ''}xxxxx"
    return pod


async def _checked(request: AdmissionRequest, pod: PodShape, old: PodShape | None,
                   context: _Context) -> AdmissionResponse:
    """The validating answer: refused with the first reason, or admitted with warnings."""
    verdict = validate.check(request, pod, old, context.settings, context.translate,
                             tenancy=context.tenancy)
    if isinstance(verdict, validate.Denial):
        return AdmissionResponse.deny(request.uid, verdict.code, verdict.message)
    denial = await validate.group_check(request, context.lookups.members) if old is None else None
    if denial is not None:
        return AdmissionResponse.deny(request.uid, denial.code, denial.message)
    return AdmissionResponse.allow(request.uid, warnings=verdict)


def _ephemeral(endpoint: Endpoint, request: AdmissionRequest) -> AdmissionResponse:
    """Containers added to a running pod (`kubectl debug`): the pod's GPUs, never their own."""
    pod, old = _pod(request.object, "object"), _pod(request.old_object, "oldObject")
    if not ephemeral.placed_by_bridge(pod):
        return AdmissionResponse.allow(request.uid)
    if endpoint != "validate":
        return AdmissionResponse.allow(request.uid, patch=ephemeral.patch_for(pod, old))
    reason = ephemeral.refusal(pod, old, request.namespace)
    if reason:
        return AdmissionResponse.deny(request.uid, 403, reason)
    return AdmissionResponse.allow(request.uid)


async def _mutation(
    request: AdmissionRequest, pod: PodShape, context: _Context
) -> list[mutate.PatchOp] | AdmissionResponse:
    """A new pod's patch, or its refusal: its group and its claims' GPUs read first."""
    owners, classes = context.lookups.owners, context.device_classes
    try:
        group = await workloads.membership(pod, request.namespace, owners)
        if group is not None:
            workloads.check_creator(pod, request.namespace, request.user_info)
        claimed = await claimed_gpus(pod, request.namespace, owners, classes)
        extended = await extended_gpu_resources(
            pod, context.lookups.extended_resources, classes)
    except WorkloadError as err:
        return AdmissionResponse.deny(request.uid, 422, f"slurmbridge cannot group this pod: {err}")
    except UnmappableClaim as err:
        return AdmissionResponse.deny(request.uid, 422, f"slurmbridge cannot run this pod: {err}")
    except WorkloadLookupError as err:  # the owner's controller retries the create
        log.error("admission.owner_lookup_failed", uid=request.uid, reason=str(err))
        return AdmissionResponse.deny(request.uid, 503, f"slurmbridge: {err}; retry")
    try:
        defaults = context.tenancy.current().defaults(
            request.namespace, pod.annotations, pod.spec.priority_class_name
        )
        return mutate.patch_for(pod, defaults, group, claimed, extended)
    except mutate.InvalidGpuRequest as err:
        return AdmissionResponse.deny(request.uid, 422, str(err))


def server_config(settings: AdmissionSettings) -> ServerConfig:
    """How the webhook serves: HTTPS (the API server requires it), h2 offered; refuses to go
    without TLS."""
    cert, key = settings.tls_cert_file, settings.tls_key_file
    if cert is None or key is None:
        raise TLSConfigError(
            "the admission webhook serves HTTPS only (the API server requires it): set "
            "SLURMBRIDGE_ADMISSION__TLS_CERT_FILE and SLURMBRIDGE_ADMISSION__TLS_KEY_FILE"
        )
    missing = [str(p) for p in (cert, key) if not p.is_file()]
    if missing:
        raise TLSConfigError(f"TLS file(s) not found: {', '.join(missing)}")
    return https_config(f"{settings.host}:{settings.port}", cert, key,
                        connections=telemetry.TLS_HANDSHAKES)


def serve(settings: AdmissionSettings, app: FastAPI) -> None:
    """Serve ``app`` over HTTPS until stopped."""
    server = DrainingServer(app, server_config(settings), settings.drain_seconds)

    async def main() -> None:
        server.on_signals()
        await server.serve()

    uvloop.run(main())
