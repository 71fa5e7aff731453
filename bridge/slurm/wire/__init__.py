"""slurmrestd wire formats: one pydantic model family per data-parser generation.

The fields the bridge uses have the same shape from v0.0.40 to v0.0.45; what
differs is how a placeholder is expressed.  ``v0041`` (parsers v0.0.41-v0.0.42)
submits a batch job whose script only waits; ``v0044`` (v0.0.43-v0.0.45) submits
an ``EXTERNAL_JOB`` in which no process runs.
"""

from bridge.slurm.wire import v0041, v0044
from bridge.slurm.wire.base import WireFamily

FAMILIES: dict[str, WireFamily] = {
    version: family
    for family in (v0041.FAMILY, v0044.FAMILY)
    for version in family.versions
}
