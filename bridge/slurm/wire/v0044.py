"""Data parsers v0.0.43-v0.0.45 (Slurm 25.05-26.05): ``EXTERNAL_JOB`` placeholders.

An external job holds its allocation with no process on the node, so nothing
of ours runs beside the pod.
"""

from pydantic import Field

from bridge.jobs.request import JobRequest
from bridge.slurm.wire.base import JobDescription, WireFamily


class ExternalJobDescription(JobDescription):
    flags: list[str] = Field(default_factory=lambda: ["EXTERNAL_JOB"])


def describe(req: JobRequest, comment: str) -> JobDescription:
    return ExternalJobDescription(**JobDescription.fields_for(req, comment))


FAMILY = WireFamily(
    versions=("v0.0.43", "v0.0.44", "v0.0.45"), placeholder="external", describe=describe
)
