"""Placeholder job names: what a Slurm admin sees in ``squeue`` for a pod."""

import re

from bridge import keys

# The name may reach a batch script and every admin's terminal: keep it to characters
# that are inert in shells, scripts and terminals, and short enough for squeue.
_UNSAFE = re.compile(r"[^A-Za-z0-9_.:/-]")
MAX_JOB_NAME = 200


def placeholder_job_name(namespace: str, name: str) -> str:
    """``k8s:<namespace>/<name>``, with anything unsafe replaced by ``_`` and cut to length."""
    return _UNSAFE.sub("_", f"{keys.JOB_NAME_PREFIX}{namespace}/{name}")[:MAX_JOB_NAME]
