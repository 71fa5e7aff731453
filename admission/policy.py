"""Namespace policy over the annotations that change what Slurm grants.

Checked by the validating webhook when a pod is created, and again by the bridge right
before it submits the pod's job: the bridge does not trust that admission ran (a namespace
the webhooks skip, a webhook registered with ``failurePolicy: Ignore``, a policy tightened
since).  A refusal names the namespace setting an admin would change.
"""

from collections.abc import Iterable, Mapping

from lightkube.models.core_v1 import Pod

from admission.config import POLICY_ANNOTATIONS, AdmissionSettings, NamespacePolicy
from bridge import keys
from bridge.jobs.timelimit import parse_time_limit

_LISTS = (keys.ACCOUNT, keys.PARTITION, keys.QOS, keys.RESERVATION, keys.WCKEY)
# Lists whose empty value allows anything (the others: an empty list allows nothing).
_OPEN_LISTS = (keys.ACCOUNT, keys.PARTITION, keys.QOS)
_LIST_SETTING = {
    keys.ACCOUNT: "accounts", keys.PARTITION: "partitions", keys.QOS: "qos",
    keys.RESERVATION: "reservations", keys.WCKEY: "wckeys",
}


def policy_refusal(
    namespace: str,
    annotations: Mapping[str, str],
    settings: AdmissionSettings,
    checked: Iterable[str] = POLICY_ANNOTATIONS,
) -> str | None:
    """Why the namespace's policy refuses these annotations (None: allowed).

    A blank value counts as unset, as the translation reads it.  A value the translation
    would refuse anyway (not a number, ...) is left to the translation's message.
    """
    policy = settings.policy_for(namespace)
    setting = settings.policy_setting(namespace)
    ns = f"in namespace {namespace!r}"
    present = {k: v.strip() for k, v in annotations.items() if v and v.strip()}
    for key in checked:
        value = present.get(key)
        if key in _LISTS:
            where = f"{setting}.{_LIST_SETTING[key]}"
            refusal = _list_refusal(key, value, policy, where, ns)
        elif value is None:
            continue
        else:
            refusal = _value_refusal(key, value, policy, setting, ns)
        if refusal:
            return refusal
    return None


def _list_refusal(
    key: str, value: str | None, policy: NamespacePolicy, setting: str, ns: str
) -> str | None:
    allowed = policy.allowed(key)
    if key in _OPEN_LISTS and not allowed:
        return None
    if value is None:
        if key in _OPEN_LISTS:  # restricted and unset: Slurm would pick its own default
            return f"annotation {key} is required {ns}: set it to one of {allowed} ({setting})"
        return None
    if not allowed:
        return f"annotation {key} is not allowed {ns}: an admin lists the values in {setting}"
    # Slurm takes comma-separated partitions and reservations: every one must be allowed.
    refused = [v.strip() for v in value.split(",") if v.strip() not in allowed]
    if refused:
        return (
            f"{key}={value!r} is not allowed {ns}: {', '.join(map(repr, refused))} not in the "
            f"allowed {allowed} ({setting})"
        )
    return None


def _value_refusal(
    key: str, value: str, policy: NamespacePolicy, setting: str, ns: str
) -> str | None:
    if key == keys.PRIORITY:
        if policy.max_priority is None:
            return f"annotation {key} is not allowed {ns}: an admin sets {setting}.max_priority"
        if value.isdigit() and int(value) > policy.max_priority:
            return (
                f"{key}={value} is too high {ns}: above "
                f"{setting}.max_priority={policy.max_priority}"
            )
    elif key == keys.TIME_LIMIT:
        limit = policy.max_time_limit_minutes
        if limit is None:
            return (
                f"annotation {key} is not allowed {ns}: an admin sets "
                f"{setting}.max_time_limit_minutes"
            )
        try:
            minutes = parse_time_limit(value)
        except ValueError:
            return None
        if minutes > limit:
            return (
                f"{key}={value!r} is too high {ns}: above "
                f"{setting}.max_time_limit_minutes={limit}"
            )
    elif key == keys.CONSTRAINTS and not policy.allow_constraints:
        return f"annotation {key} is not allowed {ns}: an admin sets {setting}.allow_constraints"
    elif key == keys.EXCLUSIVE and value.lower() == "true" and not policy.allow_exclusive:
        return f"annotation {key} is not allowed {ns}: an admin sets {setting}.allow_exclusive"
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
            f"{settings.policy_setting(namespace)}.max_time_limit_minutes={limit}"
        )
    return None


def submit_refusal(pod: Pod, settings: AdmissionSettings) -> str | None:
    """Why the bridge must not submit a job for ``pod`` (None: go ahead).

    The last check before Slurm hears of a pod, whatever admission did: the pod's
    namespace must be one the webhooks cover, and its annotations within policy.
    """
    meta = pod.metadata
    namespace = (meta.namespace if meta else None) or ""
    if namespace in settings.excluded_namespaces:
        return (
            f"namespace {namespace!r} is not covered by slurmbridge's admission webhooks: "
            "the bridge places no pod from it; run the pod in another namespace"
        )
    deadline = pod.spec.activeDeadlineSeconds if pod.spec else None
    return policy_refusal(
        namespace, (meta.annotations if meta else None) or {}, settings
    ) or deadline_refusal(namespace, deadline, settings)
