"""Test objects built fluently, after kueue's testing wrappers: tests name what they care
about and never hand-roll a pod or a job (``PodBuilder``, ``JobBuilder``)."""

from slurmbridge_devkit.builders.jobs import JobBuilder
from slurmbridge_devkit.builders.pods import PodBuilder

__all__ = ["JobBuilder", "PodBuilder"]
