"""Admission webhooks over HTTP: scope, mutation, validation, malformed bodies, TLS."""

import asyncio
import base64
import contextlib
import copy
import json
import signal
import ssl
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, cast

import httpx
import httpx2  # lightkube's HTTP client
import jsonpatch
import pytest
import structlog
import trustme
from lightkube import AsyncClient
from lightkube.config.kubeconfig import KubeConfig
from lightkube.models.core_v1 import Pod
from pydantic_settings import BaseSettings, SettingsConfigDict

from admission import telemetry
from admission.dra import ExtendedResources
from admission.groups import MemberLister
from admission.lookups import Lookups
from admission.owners import Kind, OwnerReader
from admission.scope import (
    CachedNamespaceLabels,
    NamespaceLabels,
    NamespaceLookupError,
    kube_namespace_labels,
)
from admission.webhook import TLSConfigError, create_app, server_config
from bridge import keys
from bridge.config import AdmissionSettings, NamespacePolicy
from bridge.draining import DrainingServer
from bridge.jobs.invalid_request import InvalidPodRequest
from bridge.jobs.request import JobRequest
from bridge.policy.check import SubmitRefused, deadline_refusal, for_submit, policy_refusal
from bridge.policy.tenancy import TenancyMap, TenancySource, Tenant
from slurmbridge_devkit.builders import PodBuilder
from tests.served import listening, requests_on_four_connections

BRIDGE_USER = "system:serviceaccount:slurmbridge-system:slurmbridge"
GPU_IDS_PATH = f"metadata.annotations['{keys.GPU_IDS}']"


def make_pod(
    *,
    name: str = "train",
    namespace: str = "team-a",
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    containers: list[dict[str, Any]] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A pod as the validating webhook sees it (name and uid already assigned)."""
    pod = PodBuilder(name, namespace).bare().uid(f"uid-{name}").spec(**spec)
    if annotations is not None:
        pod.annotations(annotations)
    if labels is not None:
        pod.labels(labels)
    if containers:
        pod.containers(*containers)
    return pod.manifest()


def make_review(
    pod: dict[str, Any] | None,
    *,
    operation: str = "CREATE",
    old: dict[str, Any] | None = None,
    uid: str = "review-1",
    username: str = "alice",
    dry_run: bool = False,
    namespace: str | None = None,
) -> dict[str, Any]:
    ns = namespace if namespace is not None else (pod or old or {})["metadata"]["namespace"]
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "name": (pod or old or {}).get("metadata", {}).get("name", ""),
            "namespace": ns,
            "operation": operation,
            "userInfo": {"username": username, "groups": ["system:authenticated"]},
            "object": pod,
            "oldObject": old,
            "dryRun": dry_run,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
        },
    }


def gpu_container(
    name: str, requests: Any = None, limits: Any = None, **extra: Any
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = {"cpu": "1", keys.GPU_RESOURCE: requests}
    if limits is not None:
        resources["limits"] = {keys.GPU_RESOURCE: limits}
    return {"name": name, "image": "cuda", "resources": resources, **extra}


def apply(pod: dict[str, Any], response: Mapping[str, Any]) -> dict[str, Any]:
    """The pod after the API server applied the webhook's patch (unchanged without one)."""
    if "patch" not in response:
        return copy.deepcopy(pod)
    assert response["patchType"] == "JSONPatch"
    patch = json.loads(base64.b64decode(response["patch"]))
    result: dict[str, Any] = jsonpatch.apply_patch(pod, patch)
    return result


class FakeLabels:
    """Namespace labels from a dict, counting lookups; ``fail`` simulates an API outage."""

    def __init__(self, labels: dict[str, dict[str, str]] | None = None) -> None:
        self.labels = labels or {}
        self.calls: list[str] = []
        self.fail = False

    async def __call__(self, name: str) -> Mapping[str, str]:
        self.calls.append(name)
        if self.fail:
            raise NamespaceLookupError("connection refused")
        return self.labels.get(name, {})


async def _no_owner(kind: Kind, namespace: str, name: str) -> dict[str, Any] | None:
    return None


async def _no_members(namespace: str, group: str) -> list[Pod]:
    return []


async def _no_classes() -> Mapping[str, str]:
    return {}


def lookups(
    namespace_labels: NamespaceLabels | None = None, *, owners: OwnerReader | None = None,
    members: MemberLister | None = None, extended_resources: ExtendedResources | None = None,
) -> Lookups:
    """The webhook's reads of a cluster holding what the test gives and nothing else."""
    return Lookups(namespace_labels or FakeLabels(), owners or _no_owner,
                   members or _no_members, extended_resources or _no_classes)


SETTINGS = AdmissionSettings(
    enrolled_namespaces=["team-a"],
    policies={"team-a": NamespacePolicy(accounts=["physics", "chem"], qos=["normal"])},
)
# Every namespace mapped, nothing set: the policies above decide (tests of the tenancy itself
# are in test_tenancy.py).
OPEN = TenancySource(None, fixed=TenancyMap(default=Tenant()))


@pytest.fixture
def labels() -> FakeLabels:
    return FakeLabels({"labelled": {keys.NAMESPACE_ENROLLED: "true"}, "other": {"x": "y"}})


@pytest.fixture
async def client(labels: FakeLabels) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(SETTINGS, lookups(labels), tenancy=OPEN)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://webhook") as c:
        yield c


async def post(client: httpx.AsyncClient, endpoint: str, review: dict[str, Any]) -> dict[str, Any]:
    reply = await client.post(f"/{endpoint}", json=review)
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["apiVersion"] == "admission.k8s.io/v1"
    assert body["kind"] == "AdmissionReview"
    assert body["response"]["uid"] == review["request"]["uid"]
    response: dict[str, Any] = body["response"]
    return response


async def mutated(client: httpx.AsyncClient, pod: dict[str, Any], **kw: Any) -> dict[str, Any]:
    response = await post(client, "mutate", make_review(pod, **kw))
    assert response["allowed"] is True
    return apply(pod, response)


# --- scope -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("namespace", "spec", "expected"),
    [
        ("team-a", {}, True),  # enrolled in the settings
        ("labelled", {}, True),  # enrolled by namespace label
        ("other", {"schedulerName": keys.SCHEDULER_NAME}, True),  # asked by name
        ("other", {}, False),
        ("other", {"schedulerName": "volcano"}, False),
        ("kube-system", {"schedulerName": keys.SCHEDULER_NAME}, False),
        ("slurmbridge-system", {"schedulerName": keys.SCHEDULER_NAME}, False),
    ],
)
async def test_scope(
    client: httpx.AsyncClient, namespace: str, spec: dict[str, Any], expected: bool
) -> None:
    pod = make_pod(namespace=namespace, **spec)
    response = await post(client, "mutate", make_review(pod))
    assert ("patch" in response) is expected
    assert response["allowed"] is True


async def test_namespace_labels_are_cached(client: httpx.AsyncClient, labels: FakeLabels) -> None:
    for uid in ("a", "b", "c"):
        await post(client, "mutate", make_review(make_pod(namespace="labelled"), uid=uid))
    assert labels.calls == ["labelled"]


async def test_namespace_lookup_failure_admits_untouched_with_a_warning(
    client: httpx.AsyncClient, labels: FakeLabels
) -> None:
    labels.fail = True
    response = await post(client, "mutate", make_review(make_pod(namespace="fresh")))
    assert response["allowed"] is True
    assert "patch" not in response
    assert "could not check" in response["warnings"][0]


# --- mutation --------------------------------------------------------------------------------


async def test_mutation_hands_the_pod_to_slurm(client: httpx.AsyncClient) -> None:
    pod = make_pod(
        containers=[
            gpu_container("a", requests="2", limits="2", env=[{"name": "X", "value": "1"}]),
            gpu_container("b", limits=1),
        ],
        initContainers=[gpu_container("fetch", requests="4")],
    )
    out = await mutated(client, pod)
    assert out["spec"]["schedulerName"] == keys.SCHEDULER_NAME
    assert out["spec"]["tolerations"] == [
        {"key": keys.MANAGED_TAINT, "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert out["metadata"]["annotations"] == {keys.GPUS: "4"}  # max(2 + 1, 4)
    for container in out["spec"]["containers"] + out["spec"]["initContainers"]:
        for amounts in container["resources"].values():
            assert keys.GPU_RESOURCE not in amounts
        gpu_env = [e for e in container["env"] if e["name"] in keys.GPU_ENV_VARS]
        assert [e["name"] for e in gpu_env] == list(keys.GPU_ENV_VARS)
        sources = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in gpu_env}
        assert sources == {
            "NVIDIA_VISIBLE_DEVICES": GPU_IDS_PATH,
            "CUDA_VISIBLE_DEVICES": f"metadata.annotations['{keys.CUDA_DEVICES}']",
        }
    assert out["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "1"}
    assert out["spec"]["containers"][0]["env"][-1] == {"name": "X", "value": "1"}


async def test_mutation_is_idempotent(client: httpx.AsyncClient) -> None:
    pod = make_pod(
        annotations={"team": "x"},
        containers=[
            gpu_container("a", limits="3", env=[{"name": "CUDA_VISIBLE_DEVICES", "value": "0"}])
        ],
        tolerations=[{"key": "other", "operator": "Exists"}],
    )
    once = await mutated(client, pod)
    response = await post(client, "mutate", make_review(once))
    assert "patch" not in response
    assert apply(once, response) == once
    assert once["metadata"]["annotations"] == {"team": "x", keys.GPUS: "3"}
    assert len(once["spec"]["tolerations"]) == 2


async def test_user_set_gpu_env_is_replaced(client: httpx.AsyncClient) -> None:
    env = [
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
        {"name": "Y", "value": "$(CUDA_VISIBLE_DEVICES)"},
    ]
    out = await mutated(client, make_pod(containers=[{"name": "c", "env": env}]))
    names = [e["name"] for e in out["spec"]["containers"][0]["env"]]
    assert names == [*keys.GPU_ENV_VARS, "Y"]  # first, so $(VAR) references resolve
    assert all("value" not in e for e in out["spec"]["containers"][0]["env"][:2])


async def test_pod_without_gpus_gets_env_but_no_gpu_annotation(client: httpx.AsyncClient) -> None:
    out = await mutated(client, make_pod())
    assert "annotations" not in out["metadata"]
    assert [e["name"] for e in out["spec"]["containers"][0]["env"]] == list(keys.GPU_ENV_VARS)


async def test_existing_toleration_of_the_managed_taint_is_kept(client: httpx.AsyncClient) -> None:
    for toleration in (
        {"key": keys.MANAGED_TAINT, "operator": "Exists"},
        {"operator": "Exists"},  # tolerates every taint
    ):
        out = await mutated(client, make_pod(tolerations=[toleration]))
        assert out["spec"]["tolerations"] == [toleration]


async def test_sidecar_gpus_count_alongside_the_app(client: httpx.AsyncClient) -> None:
    pod = make_pod(
        containers=[gpu_container("app", limits="1")],
        initContainers=[
            gpu_container("sidecar", limits="2", restartPolicy="Always"),
            gpu_container("setup", limits="2"),
        ],
    )
    out = await mutated(client, pod)
    assert out["metadata"]["annotations"][keys.GPUS] == "4"  # max(1 + 2, 2 + 2)


async def test_non_integer_gpu_quantity_is_refused(client: httpx.AsyncClient) -> None:
    pod = make_pod(containers=[gpu_container("a", limits="500m")])
    response = await post(client, "mutate", make_review(pod))
    assert response["allowed"] is False
    assert (
        "'a'" in response["status"]["message"] and "whole number" in response["status"]["message"]
    )


async def test_out_of_scope_pod_is_untouched(client: httpx.AsyncClient) -> None:
    pod = make_pod(namespace="other", containers=[gpu_container("a", limits="1")])
    assert await mutated(client, pod) == pod


async def test_update_is_not_mutated(client: httpx.AsyncClient) -> None:
    pod = make_pod(containers=[gpu_container("a", limits="1")])
    response = await post(client, "mutate", make_review(pod, operation="UPDATE", old=pod))
    assert response == {"uid": "review-1", "allowed": True}


async def test_the_one_review_leaves_updates_to_the_validating_webhook(
    client: httpx.AsyncClient
) -> None:
    pod = make_pod(containers=[gpu_container("a", limits="1")], annotations={keys.ACCOUNT: "bio"})
    response = await post(client, "admit", make_review(pod, operation="UPDATE", old=pod))
    assert response == {"uid": "review-1", "allowed": True}


async def test_dry_run_gets_the_same_answer(client: httpx.AsyncClient) -> None:
    pod = make_pod(containers=[gpu_container("a", limits="1")])
    for endpoint in ("mutate", "validate"):
        real = await post(client, endpoint, make_review(pod))
        dry = await post(client, endpoint, make_review(pod, dry_run=True))
        assert dry == real


async def test_subresources_and_deletes_are_admitted_untouched(client: httpx.AsyncClient) -> None:
    binding = make_review(
        {"kind": "Binding", "target": {"kind": "Node", "name": "n1"}}, namespace="team-a"
    )
    binding["request"]["subResource"] = "binding"
    delete = make_review(None, operation="DELETE", old=make_pod())
    for review in (binding, delete):
        for endpoint in ("mutate", "validate"):
            assert await post(client, endpoint, review) == {"uid": "review-1", "allowed": True}


# --- validation ------------------------------------------------------------------------------


async def denial(client: httpx.AsyncClient, review: dict[str, Any]) -> str:
    response = await post(client, "validate", review)
    assert response["allowed"] is False
    message: str = response["status"]["message"]
    return message


async def test_valid_pod_is_admitted(client: httpx.AsyncClient) -> None:
    pod = make_pod(annotations={keys.ACCOUNT: "physics", keys.QOS: "normal", keys.PARTITION: "gpu"})
    assert (await post(client, "validate", make_review(pod)))["allowed"] is True


@pytest.mark.parametrize("key", keys.BRIDGE_OWNED_ANNOTATIONS)
async def test_users_cannot_set_bridge_owned_annotations(
    client: httpx.AsyncClient, key: str
) -> None:
    pod = make_pod(annotations={keys.ACCOUNT: "physics", keys.QOS: "normal", key: "0"})
    message = await denial(client, make_review(pod))
    assert key in message and "only be written by slurmbridge" in message
    response = await post(client, "validate", make_review(pod, username=BRIDGE_USER))
    assert response["allowed"] is True


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        ({keys.ACCOUNT: "bio", keys.QOS: "normal"}, ["'bio'", "team-a", "physics", "chem"]),
        ({keys.ACCOUNT: "physics", keys.QOS: "high"}, ["'high'", "team-a", "normal"]),
        ({keys.QOS: "normal"}, ["required", keys.ACCOUNT, "physics"]),
    ],
)
async def test_policy_refusals_name_value_namespace_and_allowed(
    client: httpx.AsyncClient, annotations: dict[str, str], expected: list[str]
) -> None:
    message = await denial(client, make_review(make_pod(annotations=annotations)))
    for part in expected:
        assert part in message


async def test_default_policy_applies_to_namespaces_without_their_own() -> None:
    settings = AdmissionSettings(default_policy=NamespacePolicy(partitions=["gpu"]))
    app = create_app(settings, lookups(), tenancy=OPEN)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://w") as c:
        pod = make_pod(
            namespace="x",
            schedulerName=keys.SCHEDULER_NAME,
            annotations={keys.PARTITION: "gpu,cpu"},
        )
        message = await denial(c, make_review(pod))
        assert "'cpu'" in message and "'x'" in message and "gpu" in message


async def test_translation_refusal_is_reported() -> None:
    def translate(pod: Pod) -> JobRequest:
        raise InvalidPodRequest(
            keys.TIME_LIMIT, "forever", "minutes or D-HH:MM:SS", kind="annotation"
        )

    app = create_app(SETTINGS, lookups(), translate=translate, tenancy=OPEN)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://w") as c:
        pod = make_pod(annotations={keys.ACCOUNT: "physics", keys.QOS: "normal"})
        message = await denial(c, make_review(pod))
    assert keys.TIME_LIMIT in message and "forever" in message and "D-HH:MM:SS" in message


async def test_real_translation_refuses_a_bad_deadline(client: httpx.AsyncClient) -> None:
    pod = make_pod(
        annotations={keys.ACCOUNT: "physics", keys.QOS: "normal"}, activeDeadlineSeconds=0
    )
    assert "activeDeadlineSeconds" in await denial(client, make_review(pod))


async def test_bound_pod_bridge_annotations_are_frozen(client: httpx.AsyncClient) -> None:
    old = make_pod(annotations={keys.ACCOUNT: "physics", keys.QOS: "normal"}, nodeName="n1")
    new = copy.deepcopy(old)
    new["metadata"]["annotations"][keys.ACCOUNT] = "chem"
    message = await denial(client, make_review(new, operation="UPDATE", old=old))
    assert "'n1'" in message and keys.ACCOUNT in message and "recreate" in message
    by_bridge = make_review(new, operation="UPDATE", old=old, username=BRIDGE_USER)
    assert keys.ACCOUNT in await denial(client, by_bridge)  # nobody changes a placed job's terms


@pytest.mark.parametrize("node", [None, "n1"])
@pytest.mark.parametrize("label", [keys.GROUP, keys.GROUP_SIZE])
async def test_group_labels_are_frozen_once_the_pod_may_have_a_job(
    client: httpx.AsyncClient, label: str, node: str | None
) -> None:
    """The job's owner (pod or group) is fixed at submit: relabelling must not move it."""
    old = make_pod(annotations={keys.ACCOUNT: "physics", keys.QOS: "normal"}, nodeName=node)
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {label: "2"}
    for user in ("alice", BRIDGE_USER):
        review = make_review(new, operation="UPDATE", old=old, username=user)
        message = await denial(client, review)
        assert label in message and "recreate" in message
    new["metadata"]["labels"] = {"team": "a"}  # other labels stay free
    assert (await post(client, "validate", make_review(new, operation="UPDATE", old=old)))[
        "allowed"
    ]


async def test_a_gated_pod_may_still_change_its_slurm_terms(client: httpx.AsyncClient) -> None:
    """Nothing looks at a scheduling-gated pod yet (no filter, no early submit)."""
    gates = [{"name": "example.com/quota"}]
    old = make_pod(annotations={keys.ACCOUNT: "physics", keys.QOS: "normal"}, schedulingGates=gates)
    new = copy.deepcopy(old)
    new["metadata"]["annotations"][keys.ACCOUNT] = "chem"
    new["metadata"]["labels"] = {keys.GROUP: "g", keys.GROUP_SIZE: "2"}
    assert (await post(client, "validate", make_review(new, operation="UPDATE", old=old)))[
        "allowed"
    ]


async def test_an_enrolled_pod_is_gated_until_slurm_places_it(
    client: httpx.AsyncClient,
) -> None:
    pod = make_pod(annotations={keys.ACCOUNT: "physics", keys.QOS: "normal"})
    patched = await mutated(client, pod)
    assert patched["spec"]["schedulingGates"] == [{"name": keys.SLURM_GATE}]
    assert (await post(client, "mutate", make_review(patched))).get("patch") is None  # idempotent
    quota = make_pod(annotations={keys.ACCOUNT: "physics"},
                     schedulingGates=[{"name": "example.com/quota"}])
    assert (await mutated(client, quota))["spec"]["schedulingGates"] == [
        {"name": "example.com/quota"}, {"name": keys.SLURM_GATE}]


async def test_only_the_bridge_lifts_its_gate(client: httpx.AsyncClient) -> None:
    old = make_pod(annotations={keys.ACCOUNT: "physics", keys.QOS: "normal"},
                   schedulingGates=[{"name": keys.SLURM_GATE}])
    new = copy.deepcopy(old)
    new["spec"]["schedulingGates"] = []
    message = await denial(client, make_review(new, operation="UPDATE", old=old))
    assert keys.SLURM_GATE in message and "slurmbridge" in message
    by_bridge = make_review(new, operation="UPDATE", old=old, username=BRIDGE_USER)
    assert (await post(client, "validate", by_bridge))["allowed"] is True


async def test_a_pod_held_by_the_bridges_gate_alone_keeps_its_slurm_terms(
    client: httpx.AsyncClient,
) -> None:
    """The leader may have submitted its job already: the terms it was asked with stay."""
    old = make_pod(annotations={keys.ACCOUNT: "physics", keys.QOS: "normal"},
                   schedulingGates=[{"name": keys.SLURM_GATE}])
    new = copy.deepcopy(old)
    new["metadata"]["annotations"][keys.ACCOUNT] = "chem"
    assert keys.ACCOUNT in await denial(client, make_review(new, operation="UPDATE", old=old))


async def test_unrelated_updates_of_bound_pods_pass(client: httpx.AsyncClient) -> None:
    old = make_pod(annotations={keys.ACCOUNT: "old-account"}, nodeName="n1")  # before the policy
    new = copy.deepcopy(old)
    new["metadata"]["annotations"]["note"] = "hello"
    assert (await post(client, "validate", make_review(new, operation="UPDATE", old=old)))[
        "allowed"
    ]


async def test_unbound_update_is_checked_against_policy(client: httpx.AsyncClient) -> None:
    gates = [{"name": "example.com/quota"}]
    old = make_pod(annotations={keys.ACCOUNT: "physics", keys.QOS: "normal"}, schedulingGates=gates)
    new = copy.deepcopy(old)
    new["metadata"]["annotations"][keys.ACCOUNT] = "bio"
    assert "'bio'" in await denial(client, make_review(new, operation="UPDATE", old=old))
    new["metadata"]["annotations"][keys.JOB_ID] = "17"
    del new["metadata"]["annotations"][keys.ACCOUNT]
    assert keys.JOB_ID in await denial(client, make_review(new, operation="UPDATE", old=old))


async def test_out_of_scope_pods_are_not_validated(client: httpx.AsyncClient) -> None:
    pod = make_pod(namespace="other", annotations={keys.JOB_ID: "1"})
    assert (await post(client, "validate", make_review(pod)))["allowed"] is True


# --- malformed bodies ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"not json", "not an AdmissionReview"),
        (b"[]", "not an AdmissionReview"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', "request is missing"),
        (json.dumps({**make_review(make_pod()), "apiVersion": "v1beta1"}).encode(), "apiVersion"),
    ],
)
async def test_malformed_bodies_get_400(
    client: httpx.AsyncClient, body: bytes, reason: str
) -> None:
    for endpoint in ("mutate", "validate"):
        reply = await client.post(f"/{endpoint}", content=body)
        assert reply.status_code == 400
        assert reason in reply.json()["error"]


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda r: r["request"].pop("uid"), "uid"),
        (lambda r: r["request"].update(uid=""), "uid"),
        (lambda r: r["request"].update(object={"kind": "Deployment", "spec": {}}), "not a Pod"),
        (lambda r: r["request"].update(object=None), "not a Pod"),
        (lambda r: r["request"]["object"]["spec"].update(containers="x"), "containers"),
        (lambda r: r["request"]["resource"].update(resource="deployments"), "only reviews pods"),
        (lambda r: r["request"].update(operation="UPDATE"), "oldObject"),
    ],
)
async def test_wrong_shapes_get_400(client: httpx.AsyncClient, change: Any, reason: str) -> None:
    review = make_review(make_pod())
    change(review)
    reply = await client.post("/mutate", json=review)
    assert reply.status_code == 400
    assert reason in reply.json()["error"]


async def test_unknown_fields_are_tolerated(client: httpx.AsyncClient) -> None:
    review = make_review(make_pod(), uid="u-7")
    review["future"] = {"x": 1}
    review["request"]["somethingNew"] = [1, 2]
    assert (await post(client, "mutate", review))["allowed"] is True


async def test_healthz(client: httpx.AsyncClient) -> None:
    reply = await client.get("/healthz")
    assert reply.status_code == 200 and reply.json() == {"status": "ok"}


# --- serving ---------------------------------------------------------------------------------


def test_serve_refuses_to_start_without_tls(tmp_path: Path) -> None:
    with pytest.raises(TLSConfigError, match="HTTPS only"):
        server_config(AdmissionSettings())
    missing = AdmissionSettings(
        tls_cert_file=tmp_path / "tls.crt", tls_key_file=tmp_path / "tls.key"
    )
    with pytest.raises(TLSConfigError, match=r"tls\.crt"):
        server_config(missing)


@contextlib.asynccontextmanager
async def _served(tmp_path: Path, port: int) -> AsyncIterator[ssl.SSLContext]:
    """The webhook served over HTTPS on ``port`` as ``slurmbridge webhook`` serves it; yields
    a client context trusting it."""
    ca = trustme.CA()
    cert = ca.issue_cert("slurmbridge-webhook.slurmbridge-system.svc", "127.0.0.1")
    cert.private_key_and_cert_chain_pem.write_to_path(tmp_path / "tls.pem")
    cert.private_key_pem.write_to_path(tmp_path / "tls.key")
    settings = AdmissionSettings(
        tls_cert_file=tmp_path / "tls.pem",
        tls_key_file=tmp_path / "tls.key",
        host="127.0.0.1",
        port=port,
    )
    server = DrainingServer(create_app(settings, lookups()), server_config(settings), 0)
    task = asyncio.create_task(server.serve())
    try:
        await listening(port, task)
        context = ssl.create_default_context()
        ca.configure_trust(context)
        yield context
    finally:
        server.handle_exit(signal.SIGTERM)
        await task


async def test_serves_https(tmp_path: Path, unused_tcp_port: int) -> None:
    async with _served(tmp_path, unused_tcp_port) as context, \
            httpx.AsyncClient(verify=context) as c:
        reply = await c.get(f"https://127.0.0.1:{unused_tcp_port}/healthz")
    assert reply.json() == {"status": "ok"}


async def test_the_api_server_is_offered_h2(tmp_path: Path, unused_tcp_port: int) -> None:
    """Go's client (the API server's) takes h2 when offered: its parallel reviews share one
    connection instead of opening one, a TLS handshake each."""
    async with _served(tmp_path, unused_tcp_port) as context, \
            httpx.AsyncClient(verify=context, http2=True) as c:
        reply = await c.get(f"https://127.0.0.1:{unused_tcp_port}/healthz")
    assert reply.http_version == "HTTP/2"


async def test_each_connection_the_api_server_opens_is_one_handshake_counted(
    tmp_path: Path, unused_tcp_port: int
) -> None:
    """B1 reports the webhook's TLS handshakes per bound pod from this counter: a connection
    kept alive costs one, however many reviews it carries."""
    def count() -> float:
        return telemetry.REGISTRY.get_sample_value("slurmbridge_webhook_tls_handshakes_total") \
            or 0.0

    url = f"https://127.0.0.1:{unused_tcp_port}/healthz"
    async with _served(tmp_path, unused_tcp_port) as context:
        before = count()
        opened = await requests_on_four_connections(url, context)
        assert count() - before == opened


# --- pieces --------------------------------------------------------------------------------


async def test_patch_paths_escape_annotation_keys(client: httpx.AsyncClient) -> None:
    pod = make_pod(annotations={}, containers=[gpu_container("a", limits="1")])
    response = await post(client, "mutate", make_review(pod))
    paths = [op["path"] for op in json.loads(base64.b64decode(response["patch"]))]
    assert "/metadata/annotations/slurmbridge.io~1gpus" in paths
    assert "/spec/containers/0/resources/limits/nvidia.com~1gpu" in paths


async def test_missing_metadata_is_created(client: httpx.AsyncClient) -> None:
    pod = make_pod(schedulerName=keys.SCHEDULER_NAME, containers=[gpu_container("a", limits="1")])
    del pod["metadata"]
    out = await mutated(client, pod, namespace="team-a")
    assert out["metadata"] == {"annotations": {keys.GPUS: "1"}}


async def test_decisions_are_logged_with_fields(client: httpx.AsyncClient) -> None:
    with structlog.testing.capture_logs() as logs:
        await post(client, "validate", make_review(make_pod(annotations={keys.JOB_ID: "1"})))
    (entry,) = [e for e in logs if e["event"] == "admission.review"]
    assert (entry["uid"], entry["pod"], entry["allowed"]) == ("review-1", "team-a/train", False)
    assert keys.JOB_ID in entry["reason"]


async def test_label_cache_expires() -> None:
    now = [0.0]
    labels = FakeLabels({"ns": {"a": "b"}})
    cached = CachedNamespaceLabels(labels, ttl=30, clock=lambda: now[0])
    assert await cached("ns") == {"a": "b"}
    now[0] = 29.0
    await cached("ns")
    now[0] = 31.0
    await cached("ns")
    assert labels.calls == ["ns", "ns"]


async def test_kube_namespace_labels() -> None:
    def api(request: httpx2.Request) -> httpx2.Response:
        name = request.url.path.rsplit("/", 1)[-1]
        if name == "labelled":
            meta = {"name": name, "labels": {"x": "y"}}
            return httpx2.Response(
                200, json={"apiVersion": "v1", "kind": "Namespace", "metadata": meta}
            )
        code = {"gone": 404, "denied": 403}[name]
        status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code}
        return httpx2.Response(code, json={**status, "message": f"namespace {name}"})

    config = KubeConfig.from_dict(
        {
            "clusters": [{"name": "c", "cluster": {"server": "http://k8s"}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "x",
        }
    )
    client = AsyncClient(config=config, transport=httpx2.MockTransport(api))
    lookup = kube_namespace_labels(client)
    assert await lookup("labelled") == {"x": "y"}
    assert await lookup("gone") == {}
    with pytest.raises(NamespaceLookupError, match="denied"):
        await lookup("denied")


def test_settings_nest_under_the_product_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    class Product(BaseSettings):
        model_config = SettingsConfigDict(env_prefix="SLURMBRIDGE_", env_nested_delimiter="__")
        admission: AdmissionSettings = AdmissionSettings()

    monkeypatch.setenv("SLURMBRIDGE_ADMISSION__ENROLLED_NAMESPACES", '["ml"]')
    monkeypatch.setenv("SLURMBRIDGE_ADMISSION__POLICIES", '{"ml": {"accounts": ["ai"]}}')
    monkeypatch.setenv("SLURMBRIDGE_ADMISSION__BRIDGE_NAMESPACE", "hpc")
    settings = Product().admission
    assert settings.enrolled_namespaces == ["ml"]
    assert settings.policy_for("ml").accounts == ["ai"]
    assert settings.policy_for("other") == NamespacePolicy()
    assert settings.bridge_user == "system:serviceaccount:hpc:slurmbridge"
    assert settings.excluded_namespaces == {"kube-system", "hpc"}


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        ({keys.PRIORITY: "100"}, [keys.PRIORITY, "'team-a'", "policies.team-a.max_priority"]),
        ({keys.RESERVATION: "maint"}, [keys.RESERVATION, "policies.team-a.reservations"]),
        ({keys.WCKEY: "w"}, [keys.WCKEY, "policies.team-a.wckeys"]),
        ({keys.CONSTRAINTS: "a100"}, [keys.CONSTRAINTS, "allow_constraints"]),
        ({keys.EXCLUSIVE: "true"}, [keys.EXCLUSIVE, "allow_exclusive"]),
        ({keys.TIME_LIMIT: "60"}, [keys.TIME_LIMIT, "max_time_limit_minutes"]),
    ],
)
async def test_what_slurm_grants_is_denied_unless_the_namespace_allows_it(
    client: httpx.AsyncClient, annotations: dict[str, str], expected: list[str]
) -> None:
    pod = make_pod(annotations={keys.ACCOUNT: "physics", keys.QOS: "normal", **annotations})
    message = await denial(client, make_review(pod))
    for part in expected:
        assert part in message


async def test_namespace_grants_are_honoured_up_to_their_limits() -> None:
    settings = AdmissionSettings(default_policy=NamespacePolicy(
        reservations=["maint"], wckeys=["w"], allow_constraints=True, allow_exclusive=True,
        max_priority=100, max_time_limit_minutes=120,
    ))
    granted = {keys.RESERVATION: "maint", keys.WCKEY: "w", keys.CONSTRAINTS: "a100",
               keys.EXCLUSIVE: "true", keys.PRIORITY: "100", keys.TIME_LIMIT: "2:00:00"}
    assert policy_refusal("ml", granted, settings) is None
    for key, value, part in ((keys.PRIORITY, "101", "max_priority=100"),
                             (keys.TIME_LIMIT, "2:00:01", "max_time_limit_minutes=120"),
                             (keys.RESERVATION, "maint,big", "'big'")):
        message = policy_refusal("ml", {**granted, key: value}, settings)
        assert message is not None and part in message and "admission.default_policy" in message
    # activeDeadlineSeconds becomes the time limit: bounded the same way.
    deadline = make_pod(namespace="ml", activeDeadlineSeconds=7201)
    with pytest.raises(SubmitRefused) as refused:
        for_submit(cast(Pod, Pod.from_dict(deadline)), settings, OPEN)
    assert "activeDeadlineSeconds" in str(refused.value) and "120" in str(refused.value)
    assert deadline_refusal("ml", 7200, settings) is None
    assert deadline_refusal("ml", 10**9, AdmissionSettings()) is None  # no maximum set
    # "false" and blank values ask for nothing.
    closed = AdmissionSettings()
    assert policy_refusal("ml", {keys.EXCLUSIVE: "false", keys.PRIORITY: " "}, closed) is None


def test_the_bridge_refuses_to_submit_what_admission_would_refuse() -> None:
    """The last check before Slurm: it never trusts that a webhook saw the pod."""
    settings = AdmissionSettings(bridge_namespace="sb", exclude_namespaces=["monitoring"])

    def pod(namespace: str, **annotations: str) -> Pod:
        return cast(Pod, Pod.from_dict(make_pod(namespace=namespace, annotations=annotations)))

    admitted = pod("ml")
    assert for_submit(admitted, settings, OPEN) is admitted
    for namespace, part in (("kube-system", "not covered"), ("sb", "not covered"),
                            ("monitoring", "not covered")):
        with pytest.raises(SubmitRefused, match=part) as refused:
            for_submit(pod(namespace), settings, OPEN)
        assert namespace in str(refused.value)
    with pytest.raises(SubmitRefused, match="max_priority"):
        for_submit(pod("ml", **{keys.PRIORITY: "9"}), settings, OPEN)


async def test_preset_node_name_is_refused(client: httpx.AsyncClient) -> None:
    pod = make_pod(annotations={keys.ACCOUNT: "physics", keys.QOS: "normal"}, nodeName="n1",
                   schedulerName=keys.SCHEDULER_NAME)
    message = await denial(client, make_review(pod))
    assert "nodeName" in message and "'n1'" in message


async def test_a_deadline_above_the_namespace_maximum_is_refused() -> None:
    settings = AdmissionSettings(default_policy=NamespacePolicy(max_time_limit_minutes=60))
    app = create_app(settings, lookups(), tenancy=OPEN)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="https://webhook") as c:
        long = make_pod(schedulerName=keys.SCHEDULER_NAME, activeDeadlineSeconds=3601)
        message = await denial(c, make_review(long))
        assert "activeDeadlineSeconds=3601" in message and "max_time_limit_minutes=60" in message
        short = make_pod(schedulerName=keys.SCHEDULER_NAME, activeDeadlineSeconds=3600)
        assert (await post(c, "validate", make_review(short)))["allowed"] is True


@pytest.mark.parametrize(("annotations", "settings_key", "helm_key"), [
    ({keys.PRIORITY: "5"}, "admission.default_policy.max_priority",
     "admission.defaultPolicy.maxPriority"),
    ({keys.TIME_LIMIT: "10"}, "admission.default_policy.max_time_limit_minutes",
     "admission.defaultPolicy.maxTimeLimitMinutes"),
    ({keys.CONSTRAINTS: "a100"}, "admission.default_policy.allow_constraints",
     "admission.defaultPolicy.allowConstraints"),
    ({keys.RESERVATION: "maint"}, "admission.default_policy.reservations",
     "admission.defaultPolicy.reservations"),
])
def test_default_policy_refusals_name_the_helm_value_beside_the_setting(
    annotations: dict[str, str], settings_key: str, helm_key: str
) -> None:
    """Issue 44, build item 5: a Helm user sets admission.defaultPolicy.maxPriority, not the
    settings file's admission.default_policy.max_priority; the refusal names both."""
    message = policy_refusal("ml", annotations, AdmissionSettings())
    assert message is not None and settings_key in message, message
    assert f"Helm: {helm_key}" in message, message


def test_namespace_policy_refusals_name_one_key() -> None:
    """The chart's admission.policies take the settings-file layout: one key is both."""
    settings = AdmissionSettings(policies={"ml": NamespacePolicy()})
    message = policy_refusal("ml", {keys.PRIORITY: "5"}, settings)
    assert message is not None and "admission.policies.ml.max_priority" in message
    assert "Helm" not in message, message


async def test_an_unexpected_translation_failure_names_no_python_class() -> None:
    """A pod shape the translation does not survive: refused with what to do, never a
    Python exception class name (it goes to the webhook's log)."""
    def translate(pod: Pod) -> JobRequest:
        raise KeyError("containers")

    app = create_app(SETTINGS, lookups(), translate=translate, tenancy=OPEN)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://w") as c:
        pod = make_pod(annotations={keys.ACCOUNT: "physics", keys.QOS: "normal"})
        message = await denial(c, make_review(pod))
    assert "KeyError" not in message, message
    assert message.startswith("slurmbridge cannot run this pod:") and "containers" in message


async def test_the_one_review_checks_a_pod_before_the_api_server_names_it(
    client: httpx.AsyncClient
) -> None:
    """A mutating webhook sees a created pod before the API server gives it its UID and, under
    generateName, its name (a Job's pods): ``/admit`` checks it as the validating webhook would
    see it once stored."""
    pod = make_pod(annotations={keys.ACCOUNT: "physics", keys.QOS: "normal"})
    pod["metadata"] = {k: v for k, v in pod["metadata"].items() if k not in ("uid", "name")}
    pod["metadata"]["generateName"] = "trainer-"
    review = make_review(pod)
    del review["request"]["name"]
    response = await post(client, "admit", review)
    assert response["allowed"] is True, response
    assert keys.SCHEDULER_NAME in json.dumps(apply(pod, response)["spec"])
    pod["metadata"]["annotations"][keys.ACCOUNT] = "bio"
    refused = await post(client, "admit", make_review(pod))
    assert refused["allowed"] is False and "'bio'" in refused["status"]["message"], refused
