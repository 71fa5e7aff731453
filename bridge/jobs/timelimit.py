"""Slurm's time-limit syntax, so researchers can write what they would pass to ``sbatch -t``."""

import math
import re

ACCEPTED = "minutes (e.g. 90), or D-HH:MM:SS, D-HH:MM, D-HH, HH:MM:SS or MM:SS"
# Slurm keeps times, priorities and counts in 32 bits, the top values reserved
# (NO_VAL, INFINITE).
SLURM_UINT32_MAX = 2**32 - 3
MAX_MINUTES = SLURM_UINT32_MAX
MAX_WAIT_SECONDS = 2**31 - 1  # slurmrestd reads a switch wait as a signed 32-bit number

_WITH_DAYS = re.compile(r"([0-9]+)-([0-9]+)(?::([0-9]+)(?::([0-9]+))?)?", re.ASCII)
_WITHOUT_DAYS = re.compile(r"([0-9]+)(?::([0-9]+)(?::([0-9]+))?)?", re.ASCII)
# Seconds per field when there are no days: Slurm reads M, M:S and H:M:S.
_UNITS = {1: (60,), 2: (60, 1), 3: (3600, 60, 1)}


def _seconds(text: str) -> int:
    """Total seconds, checking that every unit after the leading one is in range."""
    if match := _WITH_DAYS.fullmatch(text):
        days, hours, minutes, seconds = (int(g or 0) for g in match.groups())
        if hours < 24 and minutes < 60 and seconds < 60:
            return ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    elif match := _WITHOUT_DAYS.fullmatch(text):
        parts = [int(g) for g in match.groups() if g is not None]
        if all(p < 60 for p in parts[1:]):
            return sum(p * u for p, u in zip(parts, _UNITS[len(parts)], strict=True))
    raise ValueError(f"not a Slurm time limit: {text!r}")


def parse_time_limit(text: str) -> int:
    """Whole minutes in a Slurm time limit, rounding seconds up as Slurm does."""
    minutes = math.ceil(_seconds(text) / 60)
    if not 1 <= minutes <= MAX_MINUTES:
        raise ValueError(f"time limit out of range: {text!r}")
    return minutes


def parse_duration_seconds(text: str) -> int:
    """Seconds in a Slurm duration (the time-limit syntax), e.g. the wait of ``--switches``."""
    seconds = _seconds(text)
    if seconds > MAX_WAIT_SECONDS:
        raise ValueError(f"duration out of range: {text!r}")
    return seconds
