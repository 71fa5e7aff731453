"""Data parsers v0.0.41-v0.0.42 (Slurm 24.05-24.11): no EXTERNAL_JOB flag yet.

The placeholder is a batch job whose script only waits, so Slurm holds the
allocation until the bridge cancels it; output goes nowhere.
"""

from bridge.jobs.request import JobRequest
from bridge.slurm.wire.base import JobDescription, WireFamily

WAIT_SCRIPT = (
    "#!/bin/sh\n"
    "# slurmbridge placeholder: holds the allocation for a Kubernetes pod\n"
    "exec sleep infinity\n"
)


class BatchJobDescription(JobDescription):
    script: str = WAIT_SCRIPT
    standard_output: str = "/dev/null"
    standard_error: str = "/dev/null"


def describe(req: JobRequest, comment: str) -> JobDescription:
    return BatchJobDescription(**JobDescription.fields_for(req, comment))


FAMILY = WireFamily(versions=("v0.0.41", "v0.0.42"), placeholder="batch", describe=describe)
