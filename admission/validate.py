"""The validating webhook's core: refuse what the bridge cannot honour, saying how to fix it."""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from lightkube.models.core_v1 import Pod

from admission.config import POLICY_ANNOTATIONS, AdmissionSettings
from admission.pod import PodShape
from admission.review import AdmissionRequest
from bridge import keys
from bridge.jobs.errors import InvalidPodRequest

PodTranslator = Callable[[Pod], object]
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
) -> Denial | None:
    """The first reason to refuse ``pod`` (CREATE, or UPDATE from ``old``), or None to admit."""
    before = old.bridge_annotations() if old else {}
    after = pod.bridge_annotations()
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    by_bridge = request.user_info.username == settings.bridge_user
    if not by_bridge:
        owned = [k for k in changed if k in keys.BRIDGE_OWNED_ANNOTATIONS]
        if owned:
            return Denial(
                403,
                f"{_names(owned)} may only be written by slurmbridge itself "
                f"({settings.bridge_user}): "
                + ("remove them from the pod" if old is None else "leave them as they are"),
            )
        if old is not None and old.is_bound and changed:
            return Denial(
                403,
                f"pod is already placed on {old.spec.node_name!r}: "
                f"{_names(changed)} can no longer change; delete and recreate "
                "the pod to change them",
            )
    checked = POLICY_ANNOTATIONS if old is None else [k for k in POLICY_ANNOTATIONS if k in changed]
    denial = _policy(request.namespace, after, checked, settings)
    if denial is None and old is None:
        denial = _translation(request, translate)
    return denial


def _names(annotations: list[str]) -> str:
    return ("annotation " if len(annotations) == 1 else "annotations ") + ", ".join(annotations)


def _policy(
    namespace: str, annotations: dict[str, str], checked: Sequence[str], settings: AdmissionSettings
) -> Denial | None:
    """Account, partition and QOS must be in the namespace's allowed lists.

    An UPDATE checks only changed values, so a policy tightened later does not
    lock existing pods against unrelated updates (finalizers, labels).  A
    restricted value left unset is refused: Slurm would pick its own default.
    """
    policy = settings.policy_for(namespace)
    for key in checked:
        allowed = policy.allowed(key)
        if not allowed:
            continue
        value = annotations.get(key)
        if value is None:
            return Denial(
                403,
                f"namespace {namespace!r} requires annotation {key}: set it to one of {allowed}",
            )
        # Slurm accepts a comma-separated list of partitions: every one must be allowed.
        refused = [v.strip() for v in value.split(",") if v.strip() not in allowed]
        if refused:
            return Denial(
                403,
                f"{key}={value!r} is not allowed in namespace {namespace!r}: "
                f"{', '.join(map(repr, refused))} not in the allowed {allowed}",
            )
    return None


def _translation(request: AdmissionRequest, translate: PodTranslator) -> Denial | None:
    """Refuse what the pod → Slurm job translation would refuse later, with its message."""
    raw: dict[str, Any] = dict(request.object or {})
    # The API server may leave metadata.namespace empty on CREATE; the request carries it.
    meta = raw.get("metadata") or {}
    raw["metadata"] = {**meta, "namespace": meta.get("namespace") or request.namespace}
    try:
        translate(cast(Pod, Pod.from_dict(raw)))
    except InvalidPodRequest as err:
        return Denial(422, f"slurmbridge cannot run this pod: {err}")
    except Exception as err:  # a shape the translation does not survive: never a 500
        return Denial(422, f"slurmbridge cannot run this pod: {type(err).__name__}: {err}")
    return None
