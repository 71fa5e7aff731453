"""Filter's outcome is a type, not a message prefix: each kind of answer is told apart,
counted under the metric label it always had, and worded as users read it today."""

import pytest
from lightkube.resources.core_v1 import Pod as PodResource
from prometheus_client import REGISTRY

from bridge import keys
from bridge.jobs.request import JobRequest
from bridge.kube.nodecache import NodeCache
from bridge.placement.index import JobIndex
from bridge.placement.outcomes import Outcome, Refused
from bridge.placement.placer import Placer
from bridge.placement.registry import SeenPods
from bridge.slurm.errors import SlurmRejected, SlurmUnavailable
from bridge.slurm.types import JobState, SlurmJob
from slurmbridge_devkit.builders import PodBuilder
from slurmbridge_devkit.fake_kube import FakeKube
from slurmbridge_devkit.fakes import FakeSlurm


class OneJobSlurm(FakeSlurm):
    """The dev kit's fake Slurm: the job it accepts is 7, started on node1 when ``state`` is
    RUNNING; or its submit fails as told."""

    def __init__(self, state: JobState = JobState.PENDING, error: Exception | None = None):
        super().__init__(first_id=7)
        self.state, self.error = state, error

    async def submit(self, req: JobRequest) -> int:
        if self.error is not None:
            raise self.error
        job_id = await super().submit(req)
        if self.state is JobState.RUNNING:
            self.start(job_id, "node1", gpus=(0,))
        return job_id

    async def get_job(self, job_id: int) -> SlurmJob:
        if self.error is not None:
            raise self.error
        return await super().get_job(job_id)


def _pod(**annotations: str) -> PodResource:
    return PodBuilder("p", "ns").uid("uid-1").resource_version("1").annotations(annotations) \
        .build()


def _placer(slurm: OneJobSlurm) -> Placer:
    return Placer(JobIndex(slurm), NodeCache(FakeKube()), SeenPods())


def _count(label: str) -> float:
    return REGISTRY.get_sample_value("slurmbridge_filter_total", {"outcome": label}) or 0.0


@pytest.mark.parametrize(
    ("slurm", "submitted", "outcome", "label", "message"),
    [
        (OneJobSlurm(JobState.PENDING), True, Outcome.PENDING, "waiting",
         "waiting for Slurm job 7 (PENDING, reason None): "),
        (OneJobSlurm(error=SlurmUnavailable("slurmrestd at http://127.0.0.1:1 failed submit")),
         False, Outcome.SLURM_UNAVAILABLE, "refused", "slurmrestd at http://127.0.0.1:1 failed"),
        (OneJobSlurm(JobState.PENDING), False, Outcome.PENDING, "waiting",
         "waiting: no Slurm job for pod ns/p yet: the bridge's leader submits it"),
    ],
)
async def test_a_pod_not_placed_gets_a_typed_outcome_and_todays_message(
    slurm: OneJobSlurm, submitted: bool, outcome: Outcome, label: str, message: str
) -> None:
    # submitted: by the leader's intake; else the pod records job 7 (read back from Slurm)
    # when Slurm answers, or records nothing yet
    placer = _placer(slurm)
    if submitted:
        await placer.prepare(_pod())
    annotations = {keys.JOB_ID: "7"} if slurm.error is not None else {}
    before = _count(label)
    verdict = await placer.filter(_pod(**annotations), ["node1", "node2"])
    assert verdict.outcome is outcome
    assert verdict.keep == [] and verdict.message.startswith(message)
    assert verdict.unresolvable == dict.fromkeys(["node1", "node2"], verdict.message)
    assert _count(label) == before + 1


async def test_a_running_job_places_the_pod_on_its_node() -> None:
    slurm = OneJobSlurm(JobState.RUNNING)
    index = JobIndex(slurm)
    placer = Placer(index, NodeCache(FakeKube()), SeenPods())
    await placer.prepare(_pod())  # the leader submits; the job is not read back
    index.record(await slurm.get_job(7))  # what the poller does when the job starts
    before = _count("allocated")
    recorded = _pod(**{keys.JOB_ID: "7", keys.SLURM_NODE: "node1"})  # the leader's record
    verdict = await placer.filter(recorded, ["node1", "node2"])
    assert verdict.outcome is Outcome.ALLOCATED and verdict.keep == ["node1"]
    # The other candidates are left out, not listed as failed: kube-scheduler schedules on
    # the kept node and reads failure statuses only when nothing is kept (B3: 5,000
    # candidates made a 200 kB answer).
    assert verdict.unresolvable == {}
    assert _count("allocated") == before + 1


async def test_a_job_slurm_refuses_is_a_typed_refusal_in_todays_words() -> None:
    """The leader's intake meets Slurm's refusal (told on the pod: test_one_path.py)."""
    slurm = OneJobSlurm(error=SlurmRejected("submit", ["Invalid qos specification"], 500))
    with pytest.raises(Refused, match=r"^Slurm refused the pod's job: Slurm refused QOS"):
        await _placer(slurm).prepare(_pod())
