"""Prometheus metrics, served at the extender's ``/metrics``."""

import platform
from importlib import metadata

from prometheus_client import Counter, Gauge, Histogram, Info

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
EXTENDER_TLS_HANDSHAKES = Counter(
    "slurmbridge_extender_tls_handshakes_total",
    "TLS handshakes on the protocol port, counted as the client connections its calls come on "
    "(each new client address and port; the server's TLS is in Rust, out of Python's sight): "
    "one per connection kube-scheduler opens (a rate that follows the pods' means its "
    "connections churn)",
)
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
LEADER = Gauge(
    "slurmbridge_leader", "1 on the replica holding the controllers' Lease, else 0"
)
SLURM_TOKEN_EXPIRY = Gauge(
    "slurmbridge_slurm_token_expiry_seconds",
    "seconds until the Slurm JWT in use expires: a token's exp claim (credential=token: mint "
    "the next one before it lapses), or the lifespan of the tokens minted with the JWT key "
    "(credential=jwt_key: renewed by the bridge)",
    ["credential"],
)
OLDEST_GATED_POD = Gauge(
    "slurmbridge_oldest_gated_pod_seconds",
    "how long the bridge's longest-gated pod has waited since its creation (0: none gated)",
)
GPU_HELD = Gauge(
    "slurmbridge_gpu_held",
    "1 per GPU index the bridge's placeholder jobs hold (the GPU map, bridge/gpumap/), by Slurm "
    "node, index, holder kind (placeholder; pod: a pod's gpu-ids outside its job's) and the "
    "holding pods' namespace; native jobs and free GPUs: `slurmbridge gpus`",
    ["node", "index", "holder", "pod_namespace"],
)
GPU_DISAGREEMENTS = Gauge(
    "slurmbridge_gpu_disagreements",
    "GPU indices where Slurm's allocation and the bridge's records disagree, by kind: "
    "pod-outside-job, two-holders, claim-outside-job (0: none)",
    ["kind"],
)
for _kind in ("pod-outside-job", "two-holders", "claim-outside-job"):  # at 0 from the start:
    GPU_DISAGREEMENTS.labels(_kind)  # the panel shows "none", not "no data"
BUILD_INFO = Info(
    "slurmbridge_build",
    "the running build: version, Python, the slurmrestd data parser (once negotiated)",
)


def build_info(data_parser: str = "") -> None:
    """Label ``slurmbridge_build_info`` with this build, and the data parser once known."""
    try:
        version = metadata.version("slurmbridge-k8s")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        version = "unknown"
    BUILD_INFO.info({"version": version, "python": platform.python_version(),
                     "data_parser": data_parser})


build_info()
