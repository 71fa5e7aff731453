"""The webhooks' scope (issue 44, item 1): the API server sends them the bridge's pods only, so
a webhook outage refuses those pods and no other.

- Render: each webhook entry's namespace selector and matchConditions, evaluated here as the API
  server does, send a pod to exactly one entry per kind when ``admission/scope.py`` says the
  pod is the bridge's, and to none otherwise; the e2e stack registers that same scope.
- Against the real API server, with the stack's webhook stopped: an ordinary pod is created, a
  pod naming the bridge or living in an enrolled namespace (labelled, or listed by name) is
  refused with the API server's message naming the entry that could not be called.
"""

import signal
from collections.abc import Callable, Mapping
from typing import Any

import pytest
import yaml
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Pod

from admission.pod import PodShape
from admission.scope import Scope
from bridge import keys
from bridge.config import AdmissionSettings
from slurmbridge_devkit.e2e import create_pod, pod_manifest
from slurmbridge_devkit.helm import Manifest, render
from slurmbridge_devkit.processes import BRIDGE_NS
from slurmbridge_devkit.stack import BridgeStack, NamespaceFactory
from slurmbridge_devkit.stack_objects import E2E_LABEL, replace_objects, webhook_configs
from slurmbridge_devkit.waiting import wait_for

pytestmark = pytest.mark.e2e

RELEASE, NAMESPACE = "sb", "sb-system"
BRIDGE_USER = f"system:serviceaccount:{NAMESPACE}:{RELEASE}-slurmbridge-extender"
NAME_KEY = "kubernetes.io/metadata.name"
KINDS = {"MutatingWebhookConfiguration": "mutate", "ValidatingWebhookConfiguration": "validate"}
# The namespaces a site has: labelled or not, listed or not, excluded.
LABELS: dict[str, dict[str, str]] = {
    "plain": {}, "opted-out": {keys.NAMESPACE_ENROLLED: "false"},
    "labelled": {keys.NAMESPACE_ENROLLED: "true"}, "ml": {},
    "physics": {keys.NAMESPACE_ENROLLED: "true"}, "monitoring": {},
    "kube-system": {}, NAMESPACE: {},
}
SCOPE_VALUES = ("--set-json", 'admission.enrolledNamespaces=["ml", "physics", "monitoring"]',
                "--set-json", 'webhook.excludeNamespaces=["monitoring"]')
# What the API server evaluates for each matchCondition the chart may render.
CONDITIONS: dict[str, tuple[str, Callable[[str, str, str], bool]]] = {
    "not-the-bridge-updating": (
        f"!(request.operation == 'UPDATE' && request.userInfo.username == '{BRIDGE_USER}')",
        lambda operation, user, _: not (operation == "UPDATE" and user == BRIDGE_USER)),
    "names-the-bridge": (
        f"has(object.spec.schedulerName) && object.spec.schedulerName == "
        f"'{keys.SCHEDULER_NAME}'",
        lambda _op, _user, scheduler: scheduler == keys.SCHEDULER_NAME),
}


def _selects(selector: Mapping[str, Any], namespace: str) -> bool:
    """A namespaceSelector's answer for ``namespace`` (labels: ``LABELS``), as the API server's:
    ``NotIn`` holds for a namespace without the key."""
    assert set(selector) == {"matchExpressions"}, selector
    labels = {**LABELS[namespace], NAME_KEY: namespace}
    for expression in selector["matchExpressions"]:
        value, operator = labels.get(expression["key"]), expression["operator"]
        assert operator in ("In", "NotIn"), expression
        if (value in expression["values"]) != (operator == "In"):
            return False
    return True


def _matches(hook: Mapping[str, Any], operation: str, user: str, scheduler: str) -> bool:
    for condition in hook["matchConditions"]:
        expression, holds = CONDITIONS[condition["name"]]
        assert condition["expression"] == expression, condition
        if not holds(operation, user, scheduler):
            return False
    return True


def _receivers(docs: list[Manifest], kind: str, namespace: str, scheduler: str, *,
               operation: str = "CREATE", user: str = "alice") -> list[str]:
    (config,) = [d for d in docs if d["kind"] == kind]
    return [hook["name"] for hook in config["webhooks"]
            if _selects(hook["namespaceSelector"], namespace)
            and _matches(hook, operation, user, scheduler)]


def _settings(docs: list[Manifest]) -> AdmissionSettings:
    (config,) = [d for d in docs if d["kind"] == "ConfigMap"
                 and d["metadata"]["name"] == f"{RELEASE}-slurmbridge-config"]
    return AdmissionSettings.model_validate(
        yaml.safe_load(config["data"]["settings.yaml"])["admission"])


def _pod(scheduler: str) -> PodShape:
    return PodShape.model_validate(
        {"spec": {"schedulerName": scheduler, "containers": [{"name": "main"}]}})


async def _in_scope(docs: list[Manifest], namespace: str, scheduler: str) -> bool:
    async def labels(name: str) -> Mapping[str, str]:
        return LABELS[name]

    return await Scope(_settings(docs), labels).includes(namespace, _pod(scheduler))


async def test_render_each_pod_of_the_bridge_goes_to_one_entry_and_no_other_pod_to_any() -> None:
    docs = render(RELEASE, NAMESPACE, *SCOPE_VALUES)
    assert _settings(docs).enrolled_namespaces == ["ml", "physics", "monitoring"]
    for kind, verb in KINDS.items():
        seen = set()
        for namespace in LABELS:
            for scheduler in (keys.SCHEDULER_NAME, "default-scheduler"):
                receivers = _receivers(docs, kind, namespace, scheduler)
                seen.update(receivers)
                expected = 1 if await _in_scope(docs, namespace, scheduler) else 0
                assert len(receivers) == expected, (kind, namespace, scheduler, receivers)
                # The bridge's own writes to its pods (the release) are never sent.
                assert not _receivers(docs, kind, namespace, scheduler, operation="UPDATE",
                                      user=BRIDGE_USER)
        assert seen == {f"{verb}.slurmbridge.io", f"labelled.{verb}.slurmbridge.io",
                        f"listed.{verb}.slurmbridge.io"}
        assert _receivers(docs, kind, "plain", keys.SCHEDULER_NAME) == [f"{verb}.slurmbridge.io"]
        assert _receivers(docs, kind, "ml", "default-scheduler") \
            == [f"listed.{verb}.slurmbridge.io"]
        assert _receivers(docs, kind, "physics", "default-scheduler") \
            == [f"labelled.{verb}.slurmbridge.io"]


def test_render_failure_policy_per_entry_and_no_listed_entry_without_names() -> None:
    docs = render(RELEASE, NAMESPACE, "--set", "webhook.enrolledFailurePolicy=Ignore",
                  *SCOPE_VALUES)
    for kind, verb in KINDS.items():
        (config,) = [d for d in docs if d["kind"] == kind]
        policies = {hook["name"]: hook["failurePolicy"] for hook in config["webhooks"]}
        assert policies == {f"{verb}.slurmbridge.io": "Fail",
                            f"labelled.{verb}.slurmbridge.io": "Ignore",
                            f"listed.{verb}.slurmbridge.io": "Ignore"}
        for hook in config["webhooks"]:  # as before the split: every entry sees the same kinds
            assert [rule["resources"] for rule in hook["rules"]] \
                == [["pods"], ["pods/ephemeralcontainers"]]
            assert hook["rules"][0]["operations"] == ["CREATE", "UPDATE"]
    default = render(RELEASE, NAMESPACE)
    for kind, verb in KINDS.items():
        (config,) = [d for d in default if d["kind"] == kind]
        assert {hook["name"]: hook["failurePolicy"] for hook in config["webhooks"]} \
            == {f"{verb}.slurmbridge.io": "Fail", f"labelled.{verb}.slurmbridge.io": "Fail"}


def test_the_e2e_stack_registers_the_charts_scope_in_its_namespaces_only() -> None:
    shipped = {d["kind"]: d for d in render("e2e", BRIDGE_NS,
                                            "--set", "serviceAccount.extenderName=slurmbridge")
               if d["kind"] in KINDS}
    for config in webhook_configs("https://127.0.0.1:1", b"ca"):
        registered = config.to_dict()
        for hook, chart in zip(registered["webhooks"], shipped[registered["kind"]]["webhooks"],
                               strict=True):
            assert hook["name"] == chart["name"]
            assert hook["matchConditions"] == chart["matchConditions"]
            assert hook["failurePolicy"] == chart["failurePolicy"]
            assert hook["namespaceSelector"]["matchExpressions"] == [
                *chart["namespaceSelector"]["matchExpressions"],
                {"key": E2E_LABEL, "operator": "In", "values": ["true"]}]


async def _outcome(kube: AsyncClient, namespace: str, pod: Pod) -> str:
    """"admitted", or the name of the webhook entry the API server could not call."""
    assert pod.metadata is not None
    pod.metadata.namespace = namespace
    try:
        await kube.create(pod, dry_run=True)
    except ApiError as exc:
        message = str(exc.status.message)
        assert "failed calling webhook" in message, message
        return message.split('"')[1]
    return "admitted"


async def test_with_the_webhook_down_only_the_bridges_pods_are_refused(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory
) -> None:
    plain = await e2e_namespace("scope-plain")
    labelled = await e2e_namespace("scope-labelled", enrolled=True)
    listed = await e2e_namespace("scope-listed")
    ordinary, bridge = pod_manifest("ordinary", scheduler=False), pod_manifest("bridge")
    expected = {
        (plain, "ordinary"): "admitted",
        (plain, "bridge"): "mutate.slurmbridge.io",
        (labelled, "ordinary"): "labelled.mutate.slurmbridge.io",
        (labelled, "bridge"): "labelled.mutate.slurmbridge.io",
        (listed, "ordinary"): "listed.mutate.slurmbridge.io",
        (listed, "bridge"): "listed.mutate.slurmbridge.io",
    }
    pods = {"ordinary": ordinary, "bridge": bridge}

    async def outcomes() -> dict[tuple[str, str], str]:
        return {(ns, name): await _outcome(kube, ns, pods[name]) for ns, name in expected}

    async def settled() -> bool:
        return await outcomes() == expected

    async def answering() -> bool:
        return await _outcome(kube, plain, bridge) == "admitted"

    bridge_stack.webhook.kill(signal.SIGTERM)
    try:
        await replace_objects(kube, bridge_stack.webhook_configs(
            "--set-json", f'admission.enrolledNamespaces=["{listed}"]'))
        # The API server picks webhook configurations up from its own watch, a moment later.
        try:
            await wait_for(settled, 30, interval=0.5,
                           what="the API server to call the webhooks of the new scope")
        except TimeoutError:
            assert await outcomes() == expected  # says which pod went where
        await create_pod(kube, plain, ordinary)  # and for real, not a dry run
    finally:
        await replace_objects(kube, bridge_stack.webhook_configs())
        bridge_stack.webhook.start()
    await wait_for(answering, 30, interval=0.5, what="the webhook to answer again")
