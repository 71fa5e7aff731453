"""Tenancy: the namespace → Slurm account/user/partition/QOS mapping, at admission and submit."""

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from lightkube.models.core_v1 import Pod

from admission.webhook import create_app
from bridge import keys
from bridge.config import AdmissionSettings
from bridge.jobs.translate import job_request_for_pod
from bridge.policy.check import SubmitRefused, for_submit
from bridge.policy.tenancy import TenancyError, TenancyMap, TenancySource, Tenant, placeholder_trust
from slurmbridge_devkit.builders import PodBuilder
from tests.unit.test_admission import apply, lookups, make_pod, make_review

MAPPING = """
namespaces:
  team-a:
    account: physics
    user: alice
    partitions: [gpu, debug]
    qos: [normal, low, high]
  team-b: {account: chemistry, user: bob}
priority_classes:
  researcher-high: high
  batch-low: low
  vip: vip
"""


@asynccontextmanager
async def tenancy_webhook(
    tenancy_file: Path, enrolled: list[str]
) -> AsyncIterator[httpx.AsyncClient]:
    """The webhook over ``tenancy_file`` (the ``tenancy_file`` fixture: tests/unit/conftest.py),
    serving the ``enrolled`` namespaces."""
    settings = AdmissionSettings(enrolled_namespaces=enrolled, tenancy_file=tenancy_file)
    app = create_app(settings, lookups())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://w") as c:
        yield c


@pytest.fixture
async def webhook(tenancy_file: Path) -> AsyncIterator[httpx.AsyncClient]:
    async with tenancy_webhook(tenancy_file, ["team-a", "team-b", "lost"]) as client:
        yield client


async def _review(client: httpx.AsyncClient, endpoint: str, pod: dict[str, Any]) -> dict[str, Any]:
    reply = await client.post(f"/{endpoint}", json=make_review(pod))
    assert reply.status_code == 200, reply.text
    response: dict[str, Any] = reply.json()["response"]
    return response


async def admit(client: httpx.AsyncClient, pod: dict[str, Any]) -> dict[str, Any]:
    """Mutate, then validate the result, as the API server does; the stored pod or a refusal."""
    mutated = apply(pod, await _review(client, "mutate", pod))
    verdict = await _review(client, "validate", mutated)
    if not verdict["allowed"]:
        raise PermissionError(verdict["status"]["message"])
    return mutated


def webhook_pod(namespace: str, annotations: dict[str, str] | None = None,
                **spec: Any) -> dict[str, Any]:
    return make_pod(namespace=namespace, annotations=annotations or {}, **spec)


async def test_mutation_fills_in_the_namespace_tenancy(webhook: httpx.AsyncClient) -> None:
    out = await admit(webhook, webhook_pod("team-a"))
    annotations = out["metadata"]["annotations"]
    assert annotations[keys.ACCOUNT] == "physics"
    assert annotations[keys.SLURM_USER] == "alice"
    assert annotations[keys.PARTITION] == "gpu"  # the first allowed
    assert annotations[keys.QOS] == "normal"
    team_b = (await admit(webhook, webhook_pod("team-b")))["metadata"]["annotations"]
    assert (team_b[keys.ACCOUNT], team_b[keys.SLURM_USER]) == ("chemistry", "bob")
    assert keys.PARTITION not in team_b and keys.QOS not in team_b  # Slurm's defaults


async def test_a_pod_keeps_its_own_allowed_choices(webhook: httpx.AsyncClient) -> None:
    out = await admit(webhook, webhook_pod("team-a", {keys.PARTITION: "debug", keys.QOS: "low"}))
    annotations = out["metadata"]["annotations"]
    assert (annotations[keys.PARTITION], annotations[keys.QOS]) == ("debug", "low")


async def test_priority_class_maps_to_qos(webhook: httpx.AsyncClient) -> None:
    out = await admit(webhook, webhook_pod("team-a", priorityClassName="researcher-high"))
    assert out["metadata"]["annotations"][keys.QOS] == "high"
    own = await admit(webhook, webhook_pod("team-a", {keys.QOS: "low"},
                                     priorityClassName="researcher-high"))
    assert own["metadata"]["annotations"][keys.QOS] == "low"  # the pod's own choice wins
    with pytest.raises(PermissionError) as refused:  # the class's QOS is not the namespace's
        await admit(webhook, webhook_pod("team-a", priorityClassName="vip"))
    assert "'vip'" in str(refused.value) and "namespaces.team-a.qos" in str(refused.value)


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        ({keys.ACCOUNT: "chemistry"}, ["'chemistry'", "['physics']", "namespaces.team-a.account"]),
        ({keys.SLURM_USER: "root"}, ["'root'", "['alice']", "namespaces.team-a.user"]),
        ({keys.PARTITION: "gpu,big"}, ["'big'", "namespaces.team-a.partitions"]),
        ({keys.QOS: "vip"}, ["'vip'", "['normal', 'low', 'high']", "namespaces.team-a.qos"]),
    ],
)
async def test_values_outside_the_tenancy_are_refused(
    webhook: httpx.AsyncClient, annotations: dict[str, str], expected: list[str]
) -> None:
    with pytest.raises(PermissionError) as refused:
        await admit(webhook, webhook_pod("team-a", annotations))
    for part in expected:
        assert part in str(refused.value)


async def test_unmapped_namespace_is_refused_naming_what_to_configure(
    webhook: httpx.AsyncClient, tenancy_file: Path
) -> None:
    with pytest.raises(PermissionError) as refused:
        await admit(webhook, webhook_pod("lost"))
    message = str(refused.value)
    assert "'lost'" in message and "namespaces.lost" in message and str(tenancy_file) in message
    assert "tenancy.namespaces.lost" in message  # the Helm value


async def test_without_a_tenancy_file_every_pod_is_refused_saying_so() -> None:
    settings = AdmissionSettings(enrolled_namespaces=["ml"])
    app = create_app(settings, lookups())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://w") as c:
        with pytest.raises(PermissionError) as refused:
            await admit(c, webhook_pod("ml"))
    assert "admission.tenancy_file" in str(refused.value)


async def test_the_mapping_changes_without_a_restart(
    webhook: httpx.AsyncClient, tenancy_file: Path
) -> None:
    with pytest.raises(PermissionError):
        await admit(webhook, webhook_pod("lost"))
    _rewrite(tenancy_file, MAPPING + "default: {account: shared, user: guest}\n")
    out = await admit(webhook, webhook_pod("lost"))
    assert out["metadata"]["annotations"][keys.SLURM_USER] == "guest"
    _rewrite(tenancy_file, "namespaces: [not, a, mapping]\n")  # broken edit: last good stays
    assert (await admit(webhook, webhook_pod("lost")))["metadata"]["annotations"][keys.ACCOUNT] == (
        "shared"
    )


def _rewrite(path: Path, text: str) -> None:
    """An admin's edit; a new mtime even within the file system's timestamp granularity."""
    path.write_text(text)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def test_an_invalid_file_fails_at_start_with_its_name(tmp_path: Path) -> None:
    bad = tmp_path / "t.yaml"
    bad.write_text("namespaces: {a: {account: 'no spaces allowed'}}\n")
    with pytest.raises(TenancyError, match=str(bad)):
        TenancySource(bad)
    bad.write_text("namespaces: {a: {qos: [normal], default_qos: high}}\n")
    with pytest.raises(TenancyError, match="default_qos"):
        TenancySource(bad)


def submitted_pod(namespace: str, annotations: dict[str, str] | None = None,
                  **spec: Any) -> Pod:
    """A pod as the bridge reads it before submitting (admission may not have run)."""
    return PodBuilder("p", namespace).uid("u-1").annotations(annotations or {}).spec(**spec).build()


def test_submit_carries_the_tenancy_even_when_admission_did_not_run(tenancy_file: Path) -> None:
    source = TenancySource(tenancy_file)
    settings = AdmissionSettings()
    pod = for_submit(submitted_pod("team-a", priorityClassName="batch-low"), settings, source)
    where = job_request_for_pod(pod).placement
    assert (where.account, where.user, where.partition, where.qos) == (
        "physics", "alice", "gpu", "low"
    )


def test_submit_refuses_what_the_tenancy_refuses_now(tenancy_file: Path) -> None:
    source = TenancySource(tenancy_file)
    settings = AdmissionSettings()
    with pytest.raises(SubmitRefused, match=r"namespaces\.lost"):
        for_submit(submitted_pod("lost"), settings, source)
    with pytest.raises(SubmitRefused, match="'root'"):  # a forged user annotation
        for_submit(submitted_pod("team-a", {keys.SLURM_USER: "root"}), settings, source)
    # An admin unmaps team-b after its pod was admitted: the bridge no longer submits it.
    admitted = for_submit(submitted_pod("team-b"), settings, source)
    _rewrite(tenancy_file, MAPPING.replace("  team-b: {account: chemistry, user: bob}\n", ""))
    with pytest.raises(SubmitRefused, match=r"namespaces\.team-b"):
        for_submit(admitted, settings, source)


def test_a_tenant_without_a_user_lets_no_pod_name_one() -> None:
    source = TenancySource(None, fixed=TenancyMap(default=Tenant(account="shared")))
    with pytest.raises(SubmitRefused, match=r"default\.user"):
        for_submit(submitted_pod("any", {keys.SLURM_USER: "root"}), AdmissionSettings(), source)
    request = job_request_for_pod(for_submit(submitted_pod("any"), AdmissionSettings(), source))
    where = request.placement
    assert (where.account, where.user) == ("shared", None)  # None: the bridge's own user


def test_placeholders_are_trusted_only_for_the_user_their_namespace_runs_as(
    tenancy_file: Path,
) -> None:
    trusted = placeholder_trust(TenancySource(tenancy_file))
    assert trusted("alice", "k8s:team-a/train")
    assert trusted("bob", "k8s:team-b/group-1")
    assert not trusted("bob", "k8s:team-a/train")  # another namespace's user: forged
    assert not trusted("alice", "train")  # not a placeholder name
    assert not trusted("alice", "k8s:lost/x")  # an unmapped namespace
    _rewrite(tenancy_file, MAPPING.replace("user: alice", "user: carol"))
    assert trusted("carol", "k8s:team-a/train")


def test_a_placeholder_stays_trusted_after_its_namespace_is_remapped_or_removed(
    tenancy_file: Path,
) -> None:
    """The jobs the bridge submitted under an earlier mapping are still its own: cancelled
    with their pods.  Forgotten, they would run on with their GPUs and the pod would get a
    second job (CI met it: a test restored the tenancy while its pod's job was starting)."""
    trusted = placeholder_trust(TenancySource(tenancy_file))
    assert trusted("alice", "k8s:team-a/train")
    _rewrite(tenancy_file, MAPPING.replace("user: alice", "user: carol"))
    assert trusted("alice", "k8s:team-a/train") and trusted("carol", "k8s:team-a/train")
    _rewrite(tenancy_file, "namespaces: {}\n")
    assert trusted("alice", "k8s:team-a/train") and trusted("bob", "k8s:team-b/x")
    assert not trusted("bob", "k8s:team-a/train")  # never ran team-a: forged
    assert not trusted("carol", "k8s:team-b/x")
