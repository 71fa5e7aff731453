"""Attacks on the bridge, written as a hostile researcher or a broken component would act.

Each test names one hole of the hardening issue and asserts what a user would notice:
no job cancelled under a running pod, no job submitted by an unauthenticated caller, a
forged job ignored and untouched, a priority request refused, a requeued job's pod
evicted with Slurm's reason, the poller alive after a bad answer, two replicas never
placing two group members on one node.
"""

import pytest

pytestmark = pytest.mark.e2e


# --- Kubernetes side: the extender's callers, admission policy, uncovered pods, GPU env ---


# --- Slurm side: ownership, forged placeholders, requeue, poller, group claims ---
