"""Network topology a pod asks of Slurm (``--switches=N@wait``, ``--segment=N``) and the pod's
own placement rules (spreads, pod affinities), which Slurm keeps or the webhook refuses."""

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from admission.webhook import create_app
from bridge import keys
from bridge.config import AdmissionSettings, NamespacePolicy
from bridge.jobs.invalid_request import InvalidPodRequest
from bridge.jobs.request import JobRequest, TopologyAsk
from bridge.jobs.translate import job_request_for_pod
from bridge.placement.reasons import explain
from bridge.policy.check import policy_refusal
from bridge.slurm.convert import slurm_job
from bridge.slurm.types import SlurmJob
from bridge.slurm.wire.base import JobInfo
from bridge.slurm.wire.v0041 import describe as describe_batch
from bridge.slurm.wire.v0044 import describe as describe_external
from tests.unit.test_admission import OPEN, lookups, make_pod, make_review, post
from tests.unit.test_resources import container
from tests.unit.test_resources import make_pod as translated_pod

GROUP_OF_4 = {keys.GROUP: "allreduce", keys.GROUP_SIZE: "4"}


def _job(annotations: dict[str, str], labels: dict[str, str] | None = None) -> JobRequest:
    return job_request_for_pod(translated_pod(container(), annotations=annotations, labels=labels))


def _wire(job: JobRequest) -> dict[str, Any]:
    """The topology fields of the job description, alike for every data parser."""
    fields = ("required_switches", "wait_for_switch", "segment_size")
    batch = describe_batch(job, "c").model_dump(exclude_none=True, include=set(fields))
    assert describe_external(job, "c").model_dump(exclude_none=True, include=set(fields)) == batch
    return batch


def test_switches_and_their_wait_reach_the_job_as_slurm_reads_them() -> None:
    job = _job({keys.SWITCHES: "1", keys.TOPOLOGY_WAIT: "10:00"}, GROUP_OF_4)
    assert job.placement.topology == TopologyAsk(switches=1, wait_seconds=600)
    assert _wire(job) == {
        "required_switches": {"set": True, "infinite": False, "number": 1},
        "wait_for_switch": 600,
    }


def test_both_asks_go_to_slurm_which_applies_the_one_its_partitions_topology_reads() -> None:
    """Slurm 26.05 took -p tree --segment=2 and -p block --switches=1 (sbatch, -N2) alike."""
    job = _job({keys.SWITCHES: "1", keys.SEGMENT: "4"}, GROUP_OF_4)
    assert job.placement.topology == TopologyAsk(switches=1, segment=4)
    assert set(_wire(job)) == {"required_switches", "segment_size"}


def test_a_segment_reaches_the_job_and_nothing_is_asked_without_annotations() -> None:
    assert _wire(_job({keys.SEGMENT: "2"}, GROUP_OF_4)) == {
        "segment_size": {"set": True, "infinite": False, "number": 2}
    }
    assert _job({}).placement.topology is None and _wire(_job({})) == {}


@pytest.mark.parametrize(
    ("annotations", "labels", "field", "words"),
    [
        ({keys.TOPOLOGY_WAIT: "5"}, None, keys.TOPOLOGY_WAIT, "set that annotation too"),
        ({keys.SEGMENT: "3"}, GROUP_OF_4, keys.SEGMENT, "a divisor of the job's 4 node"),
        ({keys.SEGMENT: "2"}, None, keys.SEGMENT, "a divisor of the job's 1 node"),
        ({keys.SWITCHES: "0"}, None, keys.SWITCHES, "a whole number from 1"),
        ({keys.SWITCHES: "two"}, None, keys.SWITCHES, "a whole number from 1"),
        ({keys.SEGMENT: "65534"}, None, keys.SEGMENT, "from 1 to 65533"),
        ({keys.SWITCHES: "1", keys.TOPOLOGY_WAIT: "1h"}, None, keys.TOPOLOGY_WAIT, "D-HH:MM"),
        ({keys.SWITCHES: "1", keys.TOPOLOGY_WAIT: "30000-00"}, None, keys.TOPOLOGY_WAIT,
         "D-HH:MM"),
    ],
)
def test_topology_asks_slurm_would_refuse_are_refused_naming_the_annotation(
    annotations: dict[str, str], labels: dict[str, str] | None, field: str, words: str
) -> None:
    with pytest.raises(InvalidPodRequest, match=words) as refused:
        _job(annotations, labels)
    assert refused.value.field == field
    assert refused.value.value == annotations[field]


def test_the_namespace_policy_must_allow_topology_asks() -> None:
    closed = AdmissionSettings(policies={"ml": NamespacePolicy()})
    for key, value in ((keys.SWITCHES, "1"), (keys.SEGMENT, "2")):
        refusal = policy_refusal("ml", {key: value}, closed)
        assert refusal is not None and key in refusal
        assert "policies.ml.allow_topology" in refusal
    refusal = policy_refusal("ml", {keys.SWITCHES: "1", keys.TOPOLOGY_WAIT: "5"},
                             AdmissionSettings(policies={"ml": NamespacePolicy()}))
    assert refusal is not None and "allow_topology" in refusal
    opened = AdmissionSettings(policies={"ml": NamespacePolicy(allow_topology=True)})
    asks = {keys.SWITCHES: "1", keys.TOPOLOGY_WAIT: "5"}
    assert policy_refusal("ml", asks, opened) is None


# --- the pod's own placement rules, through the validating webhook ----------------------------

SETTINGS = AdmissionSettings(
    enrolled_namespaces=["team-a"], policies={"team-a": NamespacePolicy(allow_topology=True)}
)
SWITCH_KEY = keys.TOPOLOGY_LABEL_PREFIX + "tree"


@pytest.fixture
async def webhook() -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(SETTINGS, lookups(), tenancy=OPEN)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://w") as c:
        yield c


def _pod(group: bool, annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return make_pod(annotations=annotations or {}, labels=dict(GROUP_OF_4) if group else None,
                    **spec)


def _spread(key: str, hard: bool = True) -> dict[str, Any]:
    return {"topologySpreadConstraints": [{
        "maxSkew": 1, "topologyKey": key, "labelSelector": {"matchLabels": {"app": "x"}},
        "whenUnsatisfiable": "DoNotSchedule" if hard else "ScheduleAnyway",
    }]}


def _affinity(kind: str, key: str, hard: bool = True) -> dict[str, Any]:
    term = {"topologyKey": key, "labelSelector": {"matchLabels": {"app": "x"}}}
    rules = ({"requiredDuringSchedulingIgnoredDuringExecution": [term]} if hard else
             {"preferredDuringSchedulingIgnoredDuringExecution": [
                 {"weight": 10, "podAffinityTerm": term}]})
    return {"affinity": {kind: rules}}


HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


@pytest.mark.parametrize(
    ("group", "annotations", "spec"),
    [
        (True, None, _spread(HOST)),  # each member gets a node of its own
        (True, None, _affinity("podAntiAffinity", HOST)),
        (True, {keys.SWITCHES: "1"}, _affinity("podAffinity", SWITCH_KEY)),
        (True, {keys.SEGMENT: "4"}, _affinity("podAffinity", keys.TOPOLOGY_LABEL_PREFIX + "b")),
        (False, None, {}),
    ],
)
async def test_rules_slurm_keeps_are_admitted_without_warnings(
    webhook: httpx.AsyncClient, group: bool, annotations: dict[str, str] | None,
    spec: dict[str, Any],
) -> None:
    response = await post(webhook, "validate", make_review(_pod(group, annotations, **spec)))
    assert response["allowed"] is True, response
    assert not response.get("warnings")


@pytest.mark.parametrize(
    ("group", "annotations", "spec", "words"),
    [
        (False, None, _spread(HOST), "separate Slurm jobs that may share a node"),
        (False, None, _affinity("podAntiAffinity", HOST), "make the pods one group"),
        (True, None, _spread(ZONE), f"never spreads pods over {ZONE}"),
        (True, None, _spread(SWITCH_KEY), "never spreads pods over its topology units"),
        (True, None, _affinity("podAntiAffinity", SWITCH_KEY), "keeps pods apart only by node"),
        (True, None, _affinity("podAffinity", SWITCH_KEY),
         f'add annotation {keys.SWITCHES}: "1"'),
        (True, {keys.SWITCHES: "2"}, _affinity("podAffinity", SWITCH_KEY),
         f'{keys.SEGMENT}: "4"'),
        (False, None, _affinity("podAffinity", HOST), "places a pod next to others only as"),
    ],
)
async def test_hard_rules_slurm_cannot_keep_are_refused_naming_the_rule(
    webhook: httpx.AsyncClient, group: bool, annotations: dict[str, str] | None,
    spec: dict[str, Any], words: str,
) -> None:
    response = await post(webhook, "validate", make_review(_pod(group, annotations, **spec)))
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert message.startswith("slurmbridge cannot run this pod: spec."), message
    assert "requiredDuringScheduling" in message or "topologySpreadConstraints[0]" in message
    assert words in message


async def test_soft_rules_are_admitted_with_a_warning_each(webhook: httpx.AsyncClient) -> None:
    spec = {**_spread(ZONE, hard=False), **_affinity("podAntiAffinity", HOST, hard=False)}
    response = await post(webhook, "validate", make_review(_pod(False, None, **spec)))
    assert response["allowed"] is True
    warnings = response["warnings"]
    assert len(warnings) == 2 and all("not applied" in w for w in warnings)
    assert "topologySpreadConstraints[0]" in warnings[0]
    assert "podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution" in warnings[1]


# --- what Slurm says while the job waits for its switches or blocks ---------------------------


def _pending(**fields: Any) -> SlurmJob:
    """A placeholder as slurmrestd 26.05 lists it (v0.0.44 job_info, fields trimmed)."""
    info = JobInfo.model_validate({
        "job_id": 252, "name": "k8s:ml/ring", "comment": f"{keys.COMMENT_OWNER}group:ml/ring",
        "job_state": ["PENDING"], "state_reason": "Resources", **fields,
    })
    return slurm_job(info, owned=True, signed=True)


def test_a_job_waiting_for_its_switch_says_so_though_slurm_says_resources() -> None:
    job = _pending(required_switches=1, maximum_switch_wait_time=240, segment_size=0)
    assert job.topology == TopologyAsk(switches=1, wait_seconds=240)
    words = explain(job)
    assert "at most 1 leaf switch and no switch has enough nodes free" in words
    assert "waits up to 4 min" in words and "then places the job on more switches" in words
    segment = explain(_pending(segment_size=2))
    assert "segments of 2, each within one block" in segment


def test_a_job_that_asked_no_topology_keeps_the_plain_resources_words() -> None:
    for fields in ({}, {"required_switches": 0, "segment_size": 0},
                   {"required_switches": 4294967294, "segment_size": 65534}):
        job = _pending(**fields)
        assert job.topology is None
        assert explain(job).startswith("no node has the CPUs, memory or GPUs free")
