"""Prometheus metrics, served at the extender's ``/metrics``."""

from prometheus_client import Counter, Gauge, Histogram

SLURM_REQUEST_SECONDS = Histogram(
    "slurmbridge_slurm_request_seconds",
    "slurmrestd request latency by operation (each HTTP attempt)",
    ["operation"],
    buckets=(0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
SLURM_ERRORS = Counter(
    "slurmbridge_slurm_errors_total",
    "slurmrestd failures by operation and kind",
    ["operation", "kind"],
)
FILTER_DECISIONS = Counter(
    "slurmbridge_filter_total",
    "extender filter answers: allocated (node kept), waiting (Slurm pending), refused",
    ["outcome"],
)
FILTER_SECONDS = Histogram(
    "slurmbridge_filter_seconds",
    "extender filter latency (kube-scheduler waits for it in every scheduling cycle)",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)
SLURM_REACHABLE = Gauge(
    "slurmbridge_slurm_reachable", "1 while the poller's last cycle reached slurmrestd, else 0"
)
POLL_ERRORS = Counter(
    "slurmbridge_poll_errors_total",
    "Slurm poll failures (the poller carries on): unavailable (slurmrestd unreachable or "
    "refusing), unreadable (an answer the bridge cannot parse), bug (anything else)",
    ["kind"],
)
for _kind in ("unavailable", "unreadable", "bug"):  # exported at 0 from the start: the
    POLL_ERRORS.labels(_kind)  # dashboard's poll-errors panel shows "none", not "no data"
PODS_RELEASED = Counter(
    "slurmbridge_pods_released_total",
    "gated pods handed to kube-scheduler with the node Slurm allocated",
)
PODS_BOUND = Counter("slurmbridge_pods_bound_total", "pods bound where Slurm allocated")
BIND_FAILURES = Counter("slurmbridge_bind_failures_total", "binds refused or failed")
POD_TO_BIND_SECONDS = Histogram(
    "slurmbridge_pod_to_bind_seconds",
    "time from pod creation to its Binding",
    buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600),
)
PLACEHOLDER_JOBS = Gauge(
    "slurmbridge_placeholder_jobs",
    "placeholder jobs this process tracks, by Slurm state",
    ["state"],
)
RECONCILES = Counter(
    "slurmbridge_reconcile_total",
    "controller passes by controller and outcome",
    ["controller", "outcome"],
)
CONTROLLER_ACTIONS = Counter(
    "slurmbridge_controller_actions_total",
    "what the controllers did: cancel, evict, drain, resume, taint",
    ["action"],
)
for _action in ("cancel", "evict", "drain", "resume", "taint"):  # at 0 from the start: the
    CONTROLLER_ACTIONS.labels(_action)  # dashboard's increase() then counts the first one too
