"""Every well-known key the bridge reads or writes on Kubernetes objects.

One module so that the webhook, the extender and the controllers can never
disagree on a spelling, and so operators have one place to look them up.
"""

from enum import StrEnum
from typing import Final

PREFIX: Final = "slurmbridge.io/"
SCHEDULER_NAME: Final = "slurmbridge"

# Annotations a user (researcher) may set on a pod.
PARTITION: Final = PREFIX + "partition"
ACCOUNT: Final = PREFIX + "account"
QOS: Final = PREFIX + "qos"
RESERVATION: Final = PREFIX + "reservation"
WCKEY: Final = PREFIX + "wckey"
CONSTRAINTS: Final = PREFIX + "constraints"
PRIORITY: Final = PREFIX + "priority"
TIME_LIMIT: Final = PREFIX + "time-limit"
EXCLUSIVE: Final = PREFIX + "exclusive"
# The name part of the placeholder job's name: the job is k8s:<namespace>/<job-name>.
JOB_NAME: Final = PREFIX + "job-name"
# The Slurm user the pod's job runs as: filled in by the webhook from the namespace's tenancy
# (bridge/policy/tenancy.py); a pod may only name its namespace's user.
SLURM_USER: Final = PREFIX + "slurm-user"
# Slurm GPU forms besides whole GPUs (nvidia.com/gpu): N of Slurm's gres/shard (a share of one
# GPU, the rest of it free for other jobs' shards), or whole GPUs of one Slurm GPU type
# (gres/gpu:<type>:N, e.g. a MIG-style slice 1g.10gb).
GPU_SHARDS: Final = PREFIX + "gpu-shards"
GPU_TYPE: Final = PREFIX + "gpu-type"
# Network topology the job's nodes must keep to (Slurm's --switches=N@wait, --segment=N): at
# most N leaf switches (topology/tree), waiting up to topology-wait for them before Slurm
# places the job on more; or segments of N nodes, each within one block (topology/block).
SWITCHES: Final = PREFIX + "switches"
TOPOLOGY_WAIT: Final = PREFIX + "topology-wait"
SEGMENT: Final = PREFIX + "segment"
TOPOLOGY_ANNOTATIONS: Final = (SWITCHES, TOPOLOGY_WAIT, SEGMENT)
USER_ANNOTATIONS: Final = (
    PARTITION, ACCOUNT, QOS, RESERVATION, WCKEY, CONSTRAINTS, PRIORITY, TIME_LIMIT, EXCLUSIVE,
    JOB_NAME, SLURM_USER, GPU_SHARDS, GPU_TYPE, *TOPOLOGY_ANNOTATIONS,
)

# SchedMD slurm-bridge's pod annotations (its docs/workload.md), read as aliases of the
# bridge's own by bridge/jobs/aliases.py; the ones the bridge cannot honour are refused.
SLINKY_PREFIX: Final = "slurmjob.slinky.slurm.net/"
SLINKY_ACCOUNT: Final = SLINKY_PREFIX + "account"
SLINKY_PARTITION: Final = SLINKY_PREFIX + "partition"
SLINKY_QOS: Final = SLINKY_PREFIX + "qos"
SLINKY_RESERVATION: Final = SLINKY_PREFIX + "reservation"
SLINKY_TIME_LIMIT: Final = SLINKY_PREFIX + "timelimit"
SLINKY_JOB_NAME: Final = SLINKY_PREFIX + "job-name"
SLINKY_CONSTRAINTS: Final = SLINKY_PREFIX + "constraints"
SLINKY_LICENSES: Final = SLINKY_PREFIX + "licenses"
SLINKY_WCKEY: Final = SLINKY_PREFIX + "wckey"
SLINKY_EXCLUSIVE: Final = SLINKY_PREFIX + "exclusive"
SLINKY_CPU_PER_TASK: Final = SLINKY_PREFIX + "cpu-per-task"
SLINKY_MEM_PER_NODE: Final = SLINKY_PREFIX + "mem-per-node"
SLINKY_GRES: Final = SLINKY_PREFIX + "gres"
SLINKY_MIN_NODES: Final = SLINKY_PREFIX + "min-nodes"
SLINKY_MAX_NODES: Final = SLINKY_PREFIX + "max-nodes"

# Annotations the webhook writes: the GPU count moved out of the pod's resources.
GPUS: Final = PREFIX + "gpus"

# Annotations only the bridge writes (at bind time); users may not set them.
JOB_ID: Final = PREFIX + "job-id"
# The Slurm node the pod's job runs on (a Node's own label is NODE_SLURM_NODE).
SLURM_NODE: Final = PREFIX + "slurm-node"
# Node labels node sync keeps equal to the Slurm node's topology units, one per topology:
# slurmbridge.io/topology-<topology>=<unit>, e.g. topology-tree=leaf1, topology-block=b1 (the
# levels a Kueue Topology lists).  Only labels with this prefix are ever written or removed.
TOPOLOGY_LABEL_PREFIX: Final = PREFIX + "topology-"
GPU_IDS: Final = PREFIX + "gpu-ids"
# CUDA_VISIBLE_DEVICES as the container numbers its GPUs: 0..n-1 under the NVIDIA container
# runtime (it mounts only the GPU_IDS devices), the physical indices where nothing renumbers.
CUDA_DEVICES: Final = PREFIX + "cuda-visible-devices"
# The owner of the pod's job (pod UID, or group:<ns>/<group>), recorded once (link/ownership.py).
OWNER: Final = PREFIX + "owner"
# A member of a heterogeneous job: its component's offset ("1": squeue's <job>+1), recorded
# with the job at release (absent for an ordinary job): what ``kubectl slurmbridge`` shows.
JOB_COMPONENT: Final = PREFIX + "job-component"
BRIDGE_OWNED_ANNOTATIONS: Final = (
    JOB_ID, SLURM_NODE, GPU_IDS, CUDA_DEVICES, OWNER, JOB_COMPONENT,
)

# Pod labels for pod groups (one Slurm job of n nodes).
GROUP: Final = PREFIX + "group"
GROUP_SIZE: Final = PREFIX + "group-size"
# The member's rank in its group (0..size-1): rank r runs on the r-th node of the job's
# node list.  Written by the webhook from the workload's own index (admission/workloads.py).
GROUP_RANK: Final = PREFIX + "group-rank"
# A mixed group's components (a launcher beside GPU workers; a JobSet's replicated jobs; an
# LWS's leader and workers), one Slurm heterogeneous job component each: the label names the
# member's component, the annotation every component and its size in order
# ("launcher=1,workers=2"), so a component's members hold consecutive ranks.  Written by the
# webhook from the workload, or by the user for a hand-made group (bridge/jobs/components.py).
GROUP_COMPONENT: Final = PREFIX + "group-component"
GROUP_COMPONENTS: Final = PREFIX + "group-components"
# Annotation on a batch Job: "true" makes its pods one group (parallelism == completions).
GANG: Final = PREFIX + "gang"

# Keys other controllers put on the pods they create, read to find a pod's group.
# batch Job controller (k8s.io/api batch/v1 JobCompletionIndexAnnotation):
JOB_COMPLETION_INDEX: Final = "batch.kubernetes.io/job-completion-index"
# JobSet controller (sigs.k8s.io/jobset api/jobset/v1alpha2/jobset_types.go), labels:
JOBSET_NAME: Final = "jobset.sigs.k8s.io/jobset-name"
JOBSET_REPLICATED_JOB: Final = "jobset.sigs.k8s.io/replicatedjob-name"
JOBSET_JOB_INDEX: Final = "jobset.sigs.k8s.io/job-index"
# LeaderWorkerSet controller (sigs.k8s.io/lws api/leaderworkerset/v1/leaderworkerset_types.go):
# labels name, group-index, worker-index (leader 0); annotation size (its spec's
# leaderWorkerTemplate.size).
LWS_NAME: Final = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX: Final = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX: Final = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_SIZE: Final = "leaderworkerset.sigs.k8s.io/size"
# Their one-domain-per-job placement (a pod webhook of theirs adds pod (anti-)affinities): on
# the JobSet; on LWS pods (the controller copies the LWS's).  One Slurm job per group cannot
# give each child its own domain: refused, pointing to SWITCHES / SEGMENT.
JOBSET_EXCLUSIVE_TOPOLOGY: Final = "alpha.jobset.sigs.k8s.io/exclusive-topology"
LWS_EXCLUSIVE_TOPOLOGY: Final = "leaderworkerset.sigs.k8s.io/exclusive-topology"
LWS_SUBGROUP_EXCLUSIVE_TOPOLOGY: Final = "leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology"

# The scheduling gate the webhook gives every pod it enrols: kube-scheduler does not look at
# the pod until the bridge removes it, in the one write that records where Slurm placed it
# (bridge/link/gate.py).  Only the bridge may remove it.
SLURM_GATE: Final = PREFIX + "slurm"

# Node labels that say which Slurm node a Node is: only under node-restriction.kubernetes.io/,
# which NodeRestriction keeps a kubelet from setting on its own Node (it may set any
# slurmbridge.io/ label there), so a compromised node cannot pass itself off as another
# (bridge/kube/nodecache.py).  An admin sets them: docs/install.md.
NODE_RESTRICTED_PREFIX: Final = "node-restriction.kubernetes.io/"
# The Slurm node behind a Kubernetes node (else: the Node's name).
NODE_SLURM_NODE: Final = NODE_RESTRICTED_PREFIX + "slurmbridge-slurm-node"
# "true": a Kubernetes node without slurmd that Slurm schedules all the same, registered as an
# EXTERNAL Slurm node (Slurm 25.11+; bridge/controllers/external.py).
EXTERNAL_NODE: Final = NODE_RESTRICTED_PREFIX + "slurmbridge-external-node"
# What an older bridge read on Nodes, which a Node's kubelet may set on itself: ignored, and
# a Node carrying one is told so (an event) in case an admin still uses them.
KUBELET_WRITABLE_NODE_LABELS: Final = (PREFIX + "slurm-node", PREFIX + "external-node")
# Condition reason (on NODE_CONDITION_SLURM) of a Node labelled external that Slurm has not
# taken (a Slurm too old, a refusal): the message says why and what to do.
REASON_EXTERNAL_NOT_REGISTERED: Final = "ExternalNodeNotRegistered"

# Namespace label that enrols every pod of the namespace.
NAMESPACE_ENROLLED: Final = PREFIX + "enabled"

# Taints.
MANAGED_TAINT: Final = PREFIX + "managed"
# Node label (value "true") marking a node whose pods Slurm places: the admission policy refuses
# other pods naming it in spec.nodeName.  Under node-restriction.kubernetes.io/, which the
# NodeRestriction admission plugin keeps a kubelet from setting or removing on its own Node.
MANAGED_NODE_LABEL: Final = "node-restriction.kubernetes.io/slurmbridge-managed"
UNAVAILABLE_TAINT: Final = PREFIX + "slurm-unavailable"

# Pod / node condition types.
POD_CONDITION_SLURM: Final = "SlurmJobAllocated"
# Condition reason (on POD_CONDITION_SLURM) when Slurm preempts a pod's job.
REASON_PREEMPTED: Final = "PreemptedBySlurm"


class EventReason(StrEnum):
    """Every reason of the Events the bridge records on pods and Nodes: a closed set, so
    operators can select them (``kubectl get events --field-selector reason=SlurmPreempted``)
    and no other string reaches ``record_event``."""

    PREEMPTED = "SlurmPreempted"  # Slurm preempted the pod's job
    SUBMIT_REFUSED = "SlurmSubmitRefused"  # Slurm refused to submit the pod's job
    GRACE_TOO_LONG = "GraceLongerThanSlurm"  # Slurm kills the job before the pod has stopped
    PENDING = "SlurmPending"  # the job's state as first shown (notifier)
    ALLOCATED = "SlurmAllocated"
    JOB_ENDED = "SlurmJobEnded"  # a bound pod's job ended (lifecycle)
    CLAIMS_UNALLOCATED = "SlurmClaimsUnallocated"  # the pod's DRA claims cannot name its GPUs
    RELEASE_REFUSED = "SlurmReleaseRefused"  # a group's job runs, but not for this member
    # On each Node of several claiming one Slurm node: none of them is used until one is left.
    NODE_CONTESTED = "SlurmNodeContested"
    # On a Node carrying a KUBELET_WRITABLE_NODE_LABELS label the bridge does not read.
    NODE_LABEL_IGNORED = "SlurmNodeLabelIgnored"
    # On a pod ``slurmbridge uninstall`` deleted: the bridge is going, nothing would place it.
    UNINSTALLED = "SlurmBridgeUninstalled"


# Condition reasons on POD_CONDITION_SLURM besides Slurm's own pending reasons.
REASON_ALLOCATED: Final = "Allocated"
REASON_SLURM_REACHABLE: Final = "SlurmReachable"  # slurmrestd answers again
REASON_BRIDGE_STARTED: Final = "BridgeStarted"  # a restarted bridge requeues unbound pods
# A gated pod whose job the bridge will not submit (policy, translation): kube-scheduler never
# sees such a pod, so this condition (and a SlurmSubmitRefused event) is where it is said.
REASON_CANNOT_SUBMIT: Final = "CannotSubmit"
# A gated pod whose job runs but whose DRA claims cannot be written with Slurm's GPUs.
REASON_CLAIMS_UNALLOCATED: Final = "ClaimsUnallocated"
# A gated group member whose group's job runs but who is not released: its seat (rank → node
# and GPUs) is held by another live member, or beyond the job's nodes, or there is none left.
REASON_SEAT_TAKEN: Final = "SeatTaken"
# A gated group member not released (or its group's job not submitted) because the members
# ask Slurm for different things (bridge/jobs/group_ask.py).
REASON_MEMBERS_DIFFER: Final = "GroupMembersDiffer"
# Condition reasons on NODE_CONDITION_SLURM.
REASON_NODE_AVAILABLE: Final = "SlurmNodeAvailable"
REASON_NODE_UNAVAILABLE: Final = "SlurmNodeUnavailable"
NODE_CONDITION_SLURM: Final = "SlurmNodeAvailable"

# DRA ResourceClaims whose allocation the bridge wrote from Slurm's GPU indices: the finalizer
# keeps the claim (and its devices) until the job ended and no pod uses it; the label names
# the job, so the lifecycle controller finds them with one list.
CLAIM_FINALIZER: Final = PREFIX + "slurm-allocation"
CLAIM_JOB_LABEL: Final = PREFIX + "job-id"
# The bridge's record on such a claim, written with the finalizer: the job, the pod and the
# devices it wrote (JSON).  A claim is the bridge's to free only with both (the chart's
# admission policy lets no one else write either) and while its allocation is the one recorded;
# the label, which anyone may set, only narrows the listing (bridge/devices/marks.py).
CLAIM_PINNED: Final = PREFIX + "pinned-allocation"

# Extended resource names of GPUs that Slurm allocates instead of the device plugin.
GPU_RESOURCE: Final = "nvidia.com/gpu"
GPU_ENV_VARS: Final = ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
# The annotation the downward API copies into each GPU variable (set in every container).
GPU_ENV_SOURCES: Final = {"NVIDIA_VISIBLE_DEVICES": GPU_IDS, "CUDA_VISIBLE_DEVICES": CUDA_DEVICES}

# Placeholder jobs: name prefix and the marker in the job comment carrying the job's owner
# (pod UID or group:<ns>/<group>).  The marker's spelling predates groups and stays, so the
# jobs an older bridge submitted are still recognised after an upgrade.
JOB_NAME_PREFIX: Final = "k8s:"
COMMENT_OWNER: Final = "slurmbridge.io/pod-uid="
# Beside it, the bridge's signature over the job's name and the owner (bridge/slurm/signing.py):
# a marker without it is not the bridge's.
COMMENT_SIGNATURE: Final = "slurmbridge.io/owner-sig="
# Reason prefix on Slurm drains the bridge sets (it only ever undoes these).
DRAIN_REASON_PREFIX: Final = "slurmbridge:"
# How the SlurmJobAllocated condition's message (and the SlurmSubmitRefused event) begins when
# Slurm refused to submit the pod's job: ``kubectl slurmbridge`` tells a refused pod by it.
SUBMIT_REFUSED_MESSAGE: Final = "Slurm refused the pod's job"
