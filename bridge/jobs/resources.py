"""A pod's effective resource requests, computed the way Kubernetes computes them.

Slurm must reserve what the kube-scheduler would have reserved for the same pod,
or the two worlds disagree about what fits on a node. The rules mirror
``k8s.io/component-helpers/resource.PodRequests``: app containers add up, init
containers run one at a time (so the largest counts), restartable ("sidecar") init
containers keep running beside everything started after them (KEP-753), pod-level
requests replace the container totals for CPU and memory, and overhead is added.
"""

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal

from lightkube.models.core_v1 import Container, Pod, ResourceRequirements

from bridge import keys
from bridge.jobs.invalid_request import InvalidPodRequest
from bridge.jobs.quantity import parse_quantity

CPU = "cpu"
MEMORY = "memory"
RESOURCES = (CPU, MEMORY, keys.GPU_RESOURCE)
# Resources that pod-level `spec.resources` may set (KEP-2837).
_POD_LEVEL = (CPU, MEMORY)
_MIB = 1024 * 1024
_QUANTITY_FORM = "a non-negative Kubernetes quantity such as 500m, 2, 1.5, 512Mi or 1G"

Requests = dict[str, Decimal]


@dataclass(frozen=True, slots=True)
class PodResources:
    """What one pod needs on its node, in the units Slurm takes."""

    cpus: int  # whole CPUs, at least 1
    memory_mb: int  # MiB; 0 when the pod requests no memory
    gpus: int


def _requests(resources: ResourceRequirements | None, where: str) -> Requests:
    """One container's (or the pod's) requests, each falling back to its limit.

    The fallback is the API server's own defaulting, which objects built outside
    it (tests, dry runs, templates) have not been through.
    """
    requests = (resources.requests if resources else None) or {}
    limits = (resources.limits if resources else None) or {}
    found: Requests = {}
    for name in RESOURCES:
        kind, text = ("requests", requests.get(name))
        if text is None:
            kind, text = ("limits", limits.get(name))
        if text is not None:
            found[name] = _parse(name, str(text), f"{where}.resources.{kind}.{name}")
    return found


def _parse(name: str, text: str, field: str) -> Decimal:
    try:
        value = parse_quantity(text)
    except ValueError:
        raise InvalidPodRequest(field, text, _QUANTITY_FORM) from None
    if value < 0:
        raise InvalidPodRequest(field, text, _QUANTITY_FORM)
    if name == keys.GPU_RESOURCE and value != value.to_integral_value():
        raise InvalidPodRequest(field, text, "a whole number of GPUs")
    return value


def _add(total: Requests, more: Mapping[str, Decimal]) -> None:
    for name, value in more.items():
        total[name] = total.get(name, Decimal(0)) + value


def _raise_to(total: Requests, other: Mapping[str, Decimal]) -> None:
    for name, value in other.items():
        total[name] = max(total.get(name, Decimal(0)), value)


def _containers(
    containers: Iterable[Container] | None, kind: str
) -> list[tuple[Container, Requests]]:
    return [(c, _requests(c.resources, f"spec.{kind}[{c.name}]")) for c in containers or ()]


def effective_requests(pod: Pod) -> Requests:
    """CPU (cores), memory (bytes) and GPUs the pod requests; absent ones are left out."""
    spec = pod.spec
    if spec is None:
        raise InvalidPodRequest("spec", None, "a pod with a spec")
    total: Requests = {}
    for _, requests in _containers(spec.containers, "containers"):
        _add(total, requests)
    sidecars: Requests = {}
    init_peak: Requests = {}
    for container, requests in _containers(spec.initContainers, "initContainers"):
        if container.restartPolicy == "Always":
            _add(total, requests)
            _add(sidecars, requests)
            _raise_to(init_peak, sidecars)
        else:
            running = dict(requests)
            _add(running, sidecars)
            _raise_to(init_peak, running)
    _raise_to(total, init_peak)
    pod_level = _requests(spec.resources, "spec")
    total.update((name, pod_level[name]) for name in _POD_LEVEL if name in pod_level)
    if spec.overhead:
        overhead = {n: str(q) for n, q in spec.overhead.items() if n in RESOURCES}
        _add(total, {n: _parse(n, q, f"spec.overhead.{n}") for n, q in overhead.items()})
    return total


def pod_resources(pod: Pod) -> PodResources:
    """The pod's effective requests rounded up to what Slurm can allocate."""
    requests = effective_requests(pod)
    memory_bytes = math.ceil(requests.get(MEMORY, 0))
    return PodResources(
        cpus=max(1, math.ceil(requests.get(CPU, 0))),
        memory_mb=-(-memory_bytes // _MIB),
        gpus=int(requests.get(keys.GPU_RESOURCE, 0)),
    )
