"""SchedMD slurm-bridge's ``slurmjob.slinky.slurm.net/`` annotations, read as the bridge's own.

A site moving from slurm-bridge keeps its manifests: each alias means its bridge annotation,
is policed by the same namespace policy and tenancy, may not disagree with the bridge's own
key, and an alias the bridge cannot honour is refused, naming it and why.
"""

import copy
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from lightkube.models.core_v1 import Pod

from bridge import keys
from bridge.config import AdmissionSettings, NamespacePolicy
from bridge.jobs.invalid_request import InvalidPodRequest
from bridge.jobs.options import SlurmOptions, slurm_options
from bridge.jobs.request import SlurmPlacement
from bridge.jobs.translate import job_request_for_pod
from bridge.policy.check import SubmitRefused, for_submit, policy_refusal
from bridge.policy.tenancy import TenancySource
from tests.unit.test_admission import make_pod, make_review, post
from tests.unit.test_tenancy import admit, submitted_pod, tenancy_webhook, webhook_pod

SB = "slurmjob.slinky.slurm.net/"


@pytest.fixture
async def webhook(tenancy_file: Path) -> AsyncIterator[httpx.AsyncClient]:
    async with tenancy_webhook(tenancy_file, ["team-a"]) as client:
        yield client


def test_every_honoured_alias_is_read_as_the_bridge_annotation() -> None:
    options = slurm_options({
        SB + "account": "physics", SB + "partition": "gpu", SB + "qos": "high",
        SB + "reservation": "maint", SB + "wckey": "proj-7", SB + "constraints": "a100&ib",
        SB + "exclusive": "true", SB + "timelimit": "1-02:00", SB + "job-name": "train",
    })
    assert options == SlurmOptions(
        SlurmPlacement(
            partition="gpu", account="physics", qos="high", reservation="maint",
            wckey="proj-7", constraints="a100&ib", exclusive=True,
        ),
        time_limit_minutes=1560, job_name="train",
    )


@pytest.mark.parametrize(("text", "minutes"), [("90", 90), ("01:30:00", 90), ("2-12", 3600)])
def test_timelimit_takes_slurm_forms(text: str, minutes: int) -> None:
    assert slurm_options({SB + "timelimit": text}).time_limit_minutes == minutes


def test_a_bad_alias_value_names_the_alias() -> None:
    with pytest.raises(InvalidPodRequest) as raised:
        slurm_options({SB + "timelimit": "1h"})
    assert raised.value.field == SB + "timelimit" and "D-HH:MM:SS" in str(raised.value)


def test_job_name_keeps_the_namespace_prefix() -> None:
    pod = submitted_pod("team-a", {SB + "job-name": "my run;rm"})
    assert job_request_for_pod(pod).name == "k8s:team-a/my_run_rm"
    assert job_request_for_pod(submitted_pod("team-a")).name == "k8s:team-a/p"
    # The bridge's own key says the same.
    pod = submitted_pod("team-a", {keys.JOB_NAME: "train"})
    assert job_request_for_pod(pod).name == "k8s:team-a/train"


def test_alias_and_bridge_key_that_disagree_are_refused_naming_both() -> None:
    with pytest.raises(InvalidPodRequest) as raised:
        slurm_options({SB + "partition": "gpu", keys.PARTITION: "cpu"})
    assert SB + "partition" in str(raised.value) and keys.PARTITION in str(raised.value)
    # Agreeing (up to surrounding blanks) is fine, and a blank alias counts as unset.
    same = slurm_options({SB + "partition": " gpu", keys.PARTITION: "gpu"})
    assert same.placement.partition == "gpu"
    blank = slurm_options({SB + "partition": " ", keys.PARTITION: "cpu"})
    assert blank.placement.partition == "cpu"


@pytest.mark.parametrize(
    ("alias", "value", "why"),
    [
        ("licenses", "matlab:1", "licenses"),
        ("min-nodes", "2", "group"),
        ("max-nodes", "2", "group"),
        ("gres", "gpu:2", "nvidia.com/gpu"),
        ("cpu-per-task", "4", "requests.cpu"),
        ("mem-per-node", "4096", "requests.memory"),
    ],
)
def test_aliases_the_bridge_cannot_honour_are_refused_with_the_reason(
    alias: str, value: str, why: str
) -> None:
    with pytest.raises(InvalidPodRequest) as raised:
        slurm_options({SB + alias: value})
    assert raised.value.field == SB + alias and why in str(raised.value)
    assert slurm_options({SB + alias: ""}) == SlurmOptions()  # blank: unset, as templated out


@pytest.mark.parametrize("alias", ["licenses", "min-nodes", "gres"])
async def test_the_validating_webhook_refuses_what_it_cannot_honour(
    webhook: httpx.AsyncClient, alias: str
) -> None:
    with pytest.raises(PermissionError) as refused:
        await admit(webhook, webhook_pod("team-a", {SB + alias: "1"}))
    assert SB + alias in str(refused.value)


# --- the namespace policy and tenancy see through the aliases -------------------------------


def test_the_policy_applies_to_aliases_as_to_the_bridge_keys() -> None:
    closed = AdmissionSettings()
    for alias, value, setting in (
        ("reservation", "maint", "reservations"), ("wckey", "w", "wckeys"),
        ("constraints", "a100", "allow_constraints"), ("exclusive", "true", "allow_exclusive"),
        ("timelimit", "60", "max_time_limit_minutes"),
    ):
        message = policy_refusal("ml", {SB + alias: value}, closed)
        assert message is not None and SB + alias in message and setting in message, message
    bounded = AdmissionSettings(default_policy=NamespacePolicy(max_time_limit_minutes=60))
    assert policy_refusal("ml", {SB + "timelimit": "01:00:00"}, bounded) is None
    message = policy_refusal("ml", {SB + "timelimit": "01:00:01"}, bounded)
    assert message is not None and "max_time_limit_minutes=60" in message
    restricted = AdmissionSettings(policies={"ml": NamespacePolicy(accounts=["physics"])})
    message = policy_refusal("ml", {SB + "account": "chem"}, restricted)
    assert message is not None and "'chem'" in message
    assert policy_refusal("ml", {SB + "account": "physics"}, restricted) is None


async def test_the_tenancy_applies_to_aliases(webhook: httpx.AsyncClient) -> None:
    for alias, value in (("account", "chemistry"), ("qos", "vip"), ("partition", "gpu,big")):
        with pytest.raises(PermissionError) as refused:
            await admit(webhook, webhook_pod("team-a", {SB + alias: value}))
        assert SB + alias in str(refused.value) and "namespaces.team-a" in str(refused.value)
    # An allowed alias is the pod's own choice: the tenancy's default does not override it.
    asked = {SB + "partition": "debug", SB + "qos": "low"}
    out = await admit(webhook, webhook_pod("team-a", asked))
    annotations = out["metadata"]["annotations"]
    assert keys.PARTITION not in annotations and keys.QOS not in annotations
    request = job_request_for_pod(cast(Pod, Pod.from_dict({
        **out, "metadata": {**out["metadata"], "uid": "u-1"}})))
    assert (request.placement.partition, request.placement.qos) == ("debug", "low")
    assert request.placement.account == "physics"


def test_the_bridge_refuses_to_submit_an_alias_the_tenancy_refuses(tenancy_file: Path) -> None:
    source = TenancySource(tenancy_file)
    with pytest.raises(SubmitRefused, match="'root'"):
        for_submit(submitted_pod("team-a", {SB + "account": "root"}), AdmissionSettings(),
                   source)
    pod = for_submit(submitted_pod("team-a", {SB + "partition": "debug"}), AdmissionSettings(),
                     source)
    assert job_request_for_pod(pod).placement.partition == "debug"


async def test_aliases_are_frozen_once_the_pod_is_placed(webhook: httpx.AsyncClient) -> None:
    old: dict[str, Any] = make_pod(annotations={SB + "timelimit": "10"}, nodeName="n1")
    new = copy.deepcopy(old)
    new["metadata"]["annotations"][SB + "timelimit"] = "20"
    response = await post(webhook, "validate", make_review(new, operation="UPDATE", old=old))
    assert response["allowed"] is False
    assert SB + "timelimit" in response["status"]["message"]
