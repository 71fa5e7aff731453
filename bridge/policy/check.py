"""Namespace policy over the annotations that change what Slurm grants.

Checked by the validating webhook when a pod is created, and again by the bridge right
before it submits the pod's job: the bridge does not trust that admission ran (a namespace
the webhooks skip, a webhook registered with ``failurePolicy: Ignore``, a policy tightened
since).  A refusal names the namespace setting an admin would change.

Account, user, partitions and QOS come from the namespace's tenancy (``tenancy.py``) where
it sets them, else from the namespace policy: one check, two sources.
"""

import copy
from collections.abc import Iterable, Mapping

from lightkube.models.core_v1 import Pod
from lightkube.models.meta_v1 import ObjectMeta

from bridge import keys
from bridge.config import AdmissionSettings, NamespacePolicy
from bridge.jobs.aliases import resolve
from bridge.jobs.invalid_request import InvalidPodRequest
from bridge.jobs.timelimit import parse_time_limit
from bridge.policy.tenancy import TENANT_FIELDS, TenancyMap, TenancySource, missing_tenant

# The user annotations a namespace policy restricts: every one that changes what Slurm grants.
POLICY_ANNOTATIONS = (
    keys.ACCOUNT, keys.PARTITION, keys.QOS, keys.RESERVATION, keys.WCKEY, keys.CONSTRAINTS,
    keys.PRIORITY, keys.TIME_LIMIT, keys.EXCLUSIVE, keys.SLURM_USER, *keys.TOPOLOGY_ANNOTATIONS,
)

_LISTS = (keys.ACCOUNT, keys.PARTITION, keys.QOS, keys.RESERVATION, keys.WCKEY, keys.SLURM_USER)
# Lists whose empty value allows anything (the others: an empty list allows nothing).
_OPEN_LISTS = (keys.ACCOUNT, keys.PARTITION, keys.QOS)
# The settings key of the default policy; the chart's value for it is camelCase (its
# admission.policies take the settings-file layout, so a namespace's key is the same in both).
_DEFAULT_POLICY = "admission.default_policy"
_LIST_SETTING = {
    keys.ACCOUNT: "accounts", keys.PARTITION: "partitions", keys.QOS: "qos",
    keys.RESERVATION: "reservations", keys.WCKEY: "wckeys",
}


def policy_refusal(
    namespace: str,
    annotations: Mapping[str, str],
    settings: AdmissionSettings,
    checked: Iterable[str] = POLICY_ANNOTATIONS,
    tenancy: TenancyMap | None = None,
) -> str | None:
    """Why the namespace's policy (and tenancy) refuses these annotations (None: allowed).

    A blank value counts as unset, as the translation reads it.  A value the translation
    would refuse anyway (not a number, ...) is left to the translation's message.
    slurm-bridge's aliases are checked as the keys they stand for, and named in the refusal;
    an alias the translation refuses (one it cannot honour, or disagreeing with its key) is
    refused here too, as there is no telling which value to police.
    """
    policy = settings.policy_for(namespace)
    setting = settings.policy_setting(namespace)
    ns = f"in namespace {namespace!r}"
    try:
        present, sources = resolve(annotations)
    except InvalidPodRequest as err:
        return str(err)
    for key in checked:
        value = present.get(key)
        label = f"{sources[key]} (as {key})" if key in sources else key
        if key in _LISTS:
            allowed, where = _allowed(key, namespace, policy, setting, tenancy)
            refusal = _list_refusal(key, value, allowed, where, ns, label=label)
        elif value is None:
            continue
        else:
            refusal = _value_refusal(key, value, policy, setting, ns, label=label)
        if refusal:
            return refusal
    return None


def _key(setting: str, name: str, value: object = None) -> str:
    """A policy setting as a refusal names it: the settings-file key (with its value) and, for
    the default policy, the Helm value an admin of the chart sets instead."""
    named = f"{setting}.{name}" + ("" if value is None else f"={value}")
    if setting != _DEFAULT_POLICY:
        return named
    head, *rest = name.split("_")
    return f"{named} (Helm: admission.defaultPolicy.{head}{''.join(p.title() for p in rest)})"


def _allowed(
    key: str, namespace: str, policy: NamespacePolicy, setting: str, tenancy: TenancyMap | None
) -> tuple[list[str], str]:
    """The values allowed for a list annotation, and where an admin sets them."""
    tenant = tenancy.tenant(namespace) if tenancy is not None else None
    from_tenant = tenant.allowed(key) if tenant is not None else []
    if from_tenant or key == keys.SLURM_USER:  # the user comes from the tenancy only
        place = tenancy.setting(namespace) if tenancy is not None else f"namespaces.{namespace}"
        return from_tenant, f"tenancy {place}.{TENANT_FIELDS[key]}"
    return policy.allowed(key), _key(setting, _LIST_SETTING[key])


def _list_refusal(
    key: str, value: str | None, allowed: list[str], setting: str, ns: str, *, label: str
) -> str | None:
    if key in _OPEN_LISTS and not allowed:
        return None
    if value is None:
        if key in _OPEN_LISTS:  # restricted and unset: Slurm would pick its own default
            return f"annotation {key} is required {ns}: set it to one of {allowed} ({setting})"
        return None
    if not allowed:
        return f"annotation {label} is not allowed {ns}: an admin lists the values in {setting}"
    # Slurm takes comma-separated partitions and reservations: every one must be allowed.
    refused = [v.strip() for v in value.split(",") if v.strip() not in allowed]
    if refused:
        return (
            f"{label}={value!r} is not allowed {ns}: {', '.join(map(repr, refused))} not in the "
            f"allowed {allowed} ({setting})"
        )
    return None


def _value_refusal(
    key: str, value: str, policy: NamespacePolicy, setting: str, ns: str, *, label: str
) -> str | None:
    unset = f"annotation {label} is not allowed {ns}: an admin sets"
    if key == keys.PRIORITY:
        if policy.max_priority is None:
            return f"{unset} {_key(setting, 'max_priority')}"
        if value.isdigit() and int(value) > policy.max_priority:
            return (
                f"{label}={value} is too high {ns}: above "
                f"{_key(setting, 'max_priority', policy.max_priority)}"
            )
    elif key == keys.TIME_LIMIT:
        limit = policy.max_time_limit_minutes
        if limit is None:
            return f"{unset} {_key(setting, 'max_time_limit_minutes')}"
        try:
            minutes = parse_time_limit(value)
        except ValueError:
            return None
        if minutes > limit:
            return (
                f"{label}={value!r} is too high {ns}: above "
                f"{_key(setting, 'max_time_limit_minutes', limit)}"
            )
    elif key == keys.CONSTRAINTS and not policy.allow_constraints:
        return f"{unset} {_key(setting, 'allow_constraints')}"
    elif key == keys.EXCLUSIVE and value.lower() == "true" and not policy.allow_exclusive:
        return f"{unset} {_key(setting, 'allow_exclusive')}"
    elif key in keys.TOPOLOGY_ANNOTATIONS and not policy.allow_topology:
        return f"{unset} {_key(setting, 'allow_topology')}"
    return None


def deadline_refusal(
    namespace: str, seconds: int | None, settings: AdmissionSettings
) -> str | None:
    """``activeDeadlineSeconds`` becomes the job's time limit: bounded like the annotation.

    Only where the namespace sets ``max_time_limit_minutes``: a deadline mostly shortens a
    pod's life, so without a maximum it passes (the translation caps it at Slurm's largest).
    """
    limit = settings.policy_for(namespace).max_time_limit_minutes
    if seconds is None or limit is None or seconds <= 0:
        return None
    if -(-seconds // 60) > limit:
        return (
            f"spec.activeDeadlineSeconds={seconds} is too high in namespace {namespace!r}: it "
            f"becomes the Slurm time limit, above "
            f"{_key(settings.policy_setting(namespace), 'max_time_limit_minutes', limit)}"
        )
    return None


class SubmitRefused(Exception):
    """The bridge must not submit this pod's job; the message says why and what to change."""


def for_submit(pod: Pod, settings: AdmissionSettings, tenancy: TenancySource) -> Pod:
    """``pod`` as the bridge submits it, or ``SubmitRefused``.

    The last check before Slurm hears of a pod, whatever admission did: the pod's
    namespace must be one the webhooks cover and have a tenancy, whose defaults are filled
    in here where the webhook did not (it may not have run), and the annotations must be
    within tenancy and policy.  The tenancy is read as it is now: a namespace unmapped since
    the pod was admitted is refused.
    """
    meta = pod.metadata or ObjectMeta()
    namespace = meta.namespace or ""
    if namespace in settings.excluded_namespaces:
        raise SubmitRefused(
            f"namespace {namespace!r} is not covered by slurmbridge's admission webhooks: "
            "the bridge places no pod from it; run the pod in another namespace"
        )
    mapping = tenancy.current()
    if mapping.tenant(namespace) is None:
        raise SubmitRefused(missing_tenant(namespace, tenancy))
    annotations = dict(meta.annotations or {})
    priority_class = pod.spec.priorityClassName if pod.spec else None
    annotations.update(mapping.defaults(namespace, annotations, priority_class))
    deadline = pod.spec.activeDeadlineSeconds if pod.spec else None
    refusal = policy_refusal(
        namespace, annotations, settings, tenancy=mapping
    ) or deadline_refusal(namespace, deadline, settings)
    if refusal:
        raise SubmitRefused(refusal)
    if annotations == (meta.annotations or {}):
        return pod
    filled = copy.deepcopy(pod)
    assert filled.metadata is not None
    filled.metadata.annotations = annotations
    return filled
