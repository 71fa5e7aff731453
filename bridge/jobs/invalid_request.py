"""The one error a pod translation raises, worded for the researcher who wrote the pod."""

import json


class InvalidPodRequest(ValueError):
    """A pod asks for something the bridge cannot turn into a Slurm job.

    ``field`` names where the bad value sits (an annotation or label key, or a pod
    field path) and ``accepted`` describes the form that would have worked, so the
    webhook can refuse the pod and the controllers can post an event that says how
    to fix it. ``value`` is None when the field is missing.
    """

    def __init__(self, field: str, value: str | None, accepted: str, *, kind: str = "") -> None:
        self.field = field
        self.value = value
        self.accepted = accepted
        where = f"{kind} {field}" if kind else field
        found = " is missing" if value is None else f"={json.dumps(value)}"
        super().__init__(f"{where}{found}: expected {accepted}")
