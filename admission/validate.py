"""The validating webhook's core: refuse what the bridge cannot honour, saying how to fix it."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import structlog
from lightkube.models.core_v1 import Pod

from admission.groups import MemberLister, group_refusal
from admission.placement_rules import placement_rules
from admission.pod import PodShape
from admission.review import AdmissionRequest
from bridge import keys
from bridge.config import AdmissionSettings
from bridge.jobs.aliases import canonical_key
from bridge.jobs.invalid_request import InvalidPodRequest
from bridge.jobs.options import pod_group
from bridge.jobs.request import JobRequest
from bridge.policy.check import POLICY_ANNOTATIONS, deadline_refusal, policy_refusal
from bridge.policy.tenancy import TenancySource, missing_tenant

log = structlog.get_logger(__name__)

PodTranslator = Callable[[Pod], JobRequest]
"""``bridge.jobs.translate.job_request_for_pod``, or a stand-in in tests."""


@dataclass(frozen=True, slots=True)
class Denial:
    """A refusal: HTTP-style ``code`` and the message ``kubectl`` shows the user."""

    code: int
    message: str


def check(
    request: AdmissionRequest,
    pod: PodShape,
    old: PodShape | None,
    settings: AdmissionSettings,
    translate: PodTranslator,
    *,
    tenancy: TenancySource,
) -> Denial | list[str]:
    """The first reason to refuse ``pod`` (CREATE, or UPDATE from ``old``), or the warnings
    to admit it with."""
    if old is None and pod.is_bound and pod.spec.scheduler_name == keys.SCHEDULER_NAME:
        return Denial(
            403,
            f"spec.nodeName is set ({pod.spec.node_name!r}) on a pod with schedulerName "
            f"{keys.SCHEDULER_NAME}: such a pod skips scheduling and Slurm never allocates it; "
            "remove spec.nodeName (use a nodeSelector to restrict where Slurm may place it)",
        )
    before = old.bridge_annotations() if old else {}
    after = pod.bridge_annotations()
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    if request.user_info.username != settings.bridge_user:
        owned = [k for k in changed if k in keys.BRIDGE_OWNED_ANNOTATIONS]
        if owned:
            return Denial(
                403,
                f"{_names(owned)} may only be written by slurmbridge itself "
                f"({settings.bridge_user}): "
                + ("remove them from the pod" if old is None else "leave them as they are"),
            )
    if old is not None:
        denial = _gate_removed(request, pod, old, settings) or _frozen(pod, old, changed)
        if denial:
            return denial
    mapping = tenancy.current()
    if old is None and mapping.tenant(request.namespace) is None:
        return Denial(403, missing_tenant(request.namespace, tenancy))
    changed_keys = {canonical_key(k) for k in changed}  # an alias stands for its bridge key
    checked = (
        POLICY_ANNOTATIONS if old is None else [k for k in POLICY_ANNOTATIONS if k in changed_keys]
    )
    refusal = policy_refusal(request.namespace, after, settings, checked, mapping)
    if refusal is None and old is None:
        refusal = deadline_refusal(request.namespace, pod.spec.active_deadline_seconds, settings)
    if refusal:
        return Denial(403, refusal)
    return [] if old is not None else _runnable(request, pod, translate)


def _runnable(
    request: AdmissionRequest, pod: PodShape, translate: PodTranslator
) -> Denial | list[str]:
    """A new pod: its job must translate, and Slurm must keep its own placement rules."""
    job = _translation(request, translate)
    if isinstance(job, Denial):
        return job
    rules = placement_rules(pod, job)
    if rules.refusal:
        return Denial(422, f"slurmbridge cannot run this pod: {rules.refusal}")
    return rules.warnings


def _gate_removed(
    request: AdmissionRequest, pod: PodShape, old: PodShape, settings: AdmissionSettings
) -> Denial | None:
    """Only the bridge lifts its gate: it does so in the write that says where Slurm put the
    pod; lifted by anyone else, kube-scheduler would place a pod Slurm has not."""
    lifted = keys.SLURM_GATE in old.gate_names() and keys.SLURM_GATE not in pod.gate_names()
    if not lifted or request.user_info.username == settings.bridge_user:
        return None
    return Denial(
        403,
        f"scheduling gate {keys.SLURM_GATE} may only be removed by slurmbridge itself "
        f"({settings.bridge_user}), once Slurm has allocated the pod's job: leave it; "
        "`kubectl slurmbridge why` shows what the job waits for",
    )


def _frozen(pod: PodShape, old: PodShape, changed: list[str]) -> Denial | None:
    """The bridge's labels and the user annotations are fixed once the pod may have a job.

    The job was asked for with them, and its owner (pod or group) recorded: a later change
    would make the bridge misjudge whose job it is.  Only an unbound pod held by a scheduling
    gate other than the bridge's own (the bridge submits nothing while one is left, and
    kube-scheduler does not look at it) may still change them.
    """
    if any(g != keys.SLURM_GATE for g in old.gate_names()) and not old.is_bound:
        return None
    user = [k for k in changed if k not in keys.BRIDGE_OWNED_ANNOTATIONS]
    labels_before, labels_after = old.bridge_labels(), pod.bridge_labels()
    labels = sorted(
        k for k in labels_before.keys() | labels_after.keys()
        if labels_before.get(k) != labels_after.get(k)
    )
    if not (user or labels):
        return None
    where = (
        f"is placed on {old.spec.node_name!r}" if old.is_bound
        else "may already have its Slurm job"
    )
    names = [_names(user)] if user else []
    if labels:
        names.append(("label " if len(labels) == 1 else "labels ") + ", ".join(labels))
    return Denial(
        403,
        f"pod {where}: {' and '.join(names)} can no longer change; delete and recreate the "
        "pod to change them",
    )


def _names(annotations: list[str]) -> str:
    return ("annotation " if len(annotations) == 1 else "annotations ") + ", ".join(annotations)


async def group_check(request: AdmissionRequest, list_members: MemberLister) -> Denial | None:
    """A new pod admitted so far, weighed against its group's live members (groups.py);
    a listing that fails admits it (the bridge keeps the same rules at release), logged."""
    try:
        pod = _as_pod(request)
        group = pod_group(pod.metadata.labels if pod.metadata else None)
    except Exception:  # a shape check() already refused, or the translation does not survive
        return None
    if group is None:
        return None
    try:
        refusal = await group_refusal(pod, group, list_members)
    except Exception as err:  # the API server away: the bridge's release still holds the line
        log.error("admission.group_lookup_failed", pod=f"{request.namespace}/{request.name}",
                  group=group.name, reason=repr(err))
        return None
    return Denial(403, f"slurmbridge cannot add this pod to its group: {refusal}") \
        if refusal else None


def _as_pod(request: AdmissionRequest) -> Pod:
    raw: dict[str, Any] = dict(request.object or {})
    # The API server may leave metadata.namespace empty on CREATE; the request carries it.
    meta = raw.get("metadata") or {}
    raw["metadata"] = {**meta, "namespace": meta.get("namespace") or request.namespace}
    return cast(Pod, Pod.from_dict(raw))


def _translation(request: AdmissionRequest, translate: PodTranslator) -> JobRequest | Denial:
    """The pod's job, or the refusal the translation would give later, with its message."""
    try:
        return translate(_as_pod(request))
    except InvalidPodRequest as err:
        return Denial(422, f"slurmbridge cannot run this pod: {err}")
    except Exception as err:  # a shape the translation does not survive: never a 500
        log.error("admission.translation_failed", pod=f"{request.namespace}/{request.name}",
                  reason=repr(err))
        return Denial(422, f"slurmbridge cannot run this pod: its spec could not be read "
                      f"({err}); fix the pod, or report it with the webhook's log")
