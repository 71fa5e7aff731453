"""Answers captured from real slurmrestd runs (tests/unit/slurm_json/), read as the bridge
reads them: the tests of GPU forms, the lifecycle and unreadable allocations share them."""

import json
from pathlib import Path
from typing import Any

from bridge.slurm.wire.base import JobInfo

CAPTURED = Path(__file__).parent / "slurm_json"


def captured_job(name: str) -> JobInfo:
    """The first job of the captured answer ``name``."""
    answer: dict[str, Any] = json.loads((CAPTURED / name).read_text())
    return JobInfo.model_validate(answer["jobs"][0])
