"""What ``kubectl slurmbridge`` shows: the bridge's pods, their events and the nodes, read back
from what the bridge wrote on Kubernetes objects (bridge/keys.py names every key).  Nothing
here asks Slurm.

Where each fact comes from:

- job id, owner, Slurm node, GPU indices: the pod's bridge-owned annotations, written when the
  job is known and in the Binding (bridge/link/bound.py);
- Slurm's state, pending reason and expected start: the pod condition ``SlurmJobAllocated``
  and the ``Slurm*`` events (bridge/placement/notifier.py, bridge/controllers/lifecycle.py),
  shown once a job has pended ``placement.notify_quiet_seconds``; before that,
  kube-scheduler's ``FailedScheduling`` events carry filter's answer ("waiting for Slurm job N
  (PENDING, reason R): ...");
- a refusal by Slurm: that condition, its message starting ``keys.SUBMIT_REFUSED_MESSAGE``,
  and a ``SlurmSubmitRefused`` event; a refusal at admission is the API server's answer to
  whoever created the pod: for pods a controller creates, its ``FailedCreate`` events;
- a node's Slurm state and drain reason: its condition ``SlurmNodeAvailable``; the taints the
  bridge sets (bridge/controllers/nodesync.py); a drain reason starting
  ``keys.DRAIN_REASON_PREFIX`` is the bridge's own, any other an admin's.

``pods`` (the status table), ``events``, ``why`` with ``advice``, ``nodes``; ``text`` renders
them for people.
"""
