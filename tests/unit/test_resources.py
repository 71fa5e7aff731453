"""Effective pod requests: Slurm must reserve what Kubernetes would reserve for the pod."""

from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from lightkube.models.core_v1 import Pod

from bridge.jobs.invalid_request import InvalidPodRequest
from bridge.jobs.resources import PodResources, pod_resources
from slurmbridge_devkit.builders import PodBuilder

GPU = "nvidia.com/gpu"
WEB = "spec.containers[web].resources"


def container(
    name: str = "main",
    requests: Mapping[str, str] | None = None,
    limits: Mapping[str, str] | None = None,
    *,
    sidecar: bool = False,
) -> dict[str, Any]:
    """A container spec; ``sidecar`` makes it a restartable init container (KEP-753)."""
    resources = {k: dict(v) for k, v in (("requests", requests), ("limits", limits)) if v}
    spec: dict[str, Any] = {"name": name, "image": "busybox", "resources": resources}
    if sidecar:
        spec["restartPolicy"] = "Always"
    return spec


def make_pod(
    *containers: dict[str, Any],
    init: Sequence[dict[str, Any]] = (),
    overhead: Mapping[str, str] | None = None,
    pod_level: Mapping[str, Mapping[str, str]] | None = None,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    deadline: int | None = None,
    uid: str | None = "6f1c0a9e-uid",
    name: str = "train",
    namespace: str = "ml",
) -> Pod:
    """A pod as the API server would return it, with only the fields the bridge reads."""
    pod = PodBuilder(name, namespace).bare().containers(*(containers or [container()]))
    optional = {
        "initContainers": list(init), "overhead": overhead, "resources": pod_level,
        "activeDeadlineSeconds": deadline,
    }
    pod.spec(**{k: v for k, v in optional.items() if v})
    if uid:
        pod.uid(uid)
    if annotations:
        pod.annotations(dict(annotations))
    if labels:
        pod.labels(dict(labels))
    return pod.build()


def cpus(*containers: dict[str, Any], **kwargs: Any) -> int:
    return pod_resources(make_pod(*containers, **kwargs)).cpus


def test_pod_without_requests_gets_one_cpu_and_slurm_default_memory() -> None:
    assert pod_resources(make_pod()) == PodResources(cpus=1, memory_mb=0, gpus=0)


@pytest.mark.parametrize(
    ("quantities", "expected"),
    [(["500m"], 1), (["500m", "250m"], 1), (["1.5", "1"], 3), (["2"], 2), (["1001m"], 2),
     (["0"], 1), (["0.1", "0.1"], 1), (["2", "2", "2"], 6)],
)
def test_app_container_cpus_add_up_and_round_up_to_whole_cpus(
    quantities: list[str], expected: int
) -> None:
    containers = [container(f"c{i}", {"cpu": q}) for i, q in enumerate(quantities)]
    assert cpus(*containers) == expected


@pytest.mark.parametrize(
    ("memory", "mib"),
    [("1Gi", 1024), ("1G", 954), ("129M", 124), ("1e9", 954), ("1Ki", 1), ("1048576", 1),
     ("1048577", 2), ("1Ti", 2**20), ("1Ei", 2**40), ("1E", 953674316407), ("1.5Gi", 1536),
     ("0", 0)],
)
def test_memory_is_mebibytes_rounded_up(memory: str, mib: int) -> None:
    assert pod_resources(make_pod(container(requests={"memory": memory}))).memory_mb == mib


def test_limit_stands_in_for_a_missing_request_as_the_api_server_defaults_it() -> None:
    only_limits = container(limits={"cpu": "3", "memory": "2Gi", GPU: "1"})
    assert pod_resources(make_pod(only_limits)) == PodResources(cpus=3, memory_mb=2048, gpus=1)


def test_request_counts_rather_than_a_larger_limit() -> None:
    assert cpus(container(requests={"cpu": "1"}, limits={"cpu": "4"})) == 1


def test_largest_init_container_counts_when_it_exceeds_the_app_containers() -> None:
    app = container("app", {"cpu": "1", "memory": "2Gi"})
    init = [container("fetch", {"cpu": "3", "memory": "1Gi"}), container("warm", {"cpu": "2"})]
    assert pod_resources(make_pod(app, init=init)) == PodResources(cpus=3, memory_mb=2048, gpus=0)


def test_sidecar_runs_beside_the_app_containers() -> None:
    sidecar = container("proxy", {"cpu": "1", "memory": "256Mi"}, sidecar=True)
    app = container("app", {"cpu": "2", "memory": "1Gi"})
    assert pod_resources(make_pod(app, init=[sidecar])) == PodResources(3, 1280, 0)


def test_sidecar_runs_beside_init_containers_started_after_it_only() -> None:
    """KEP-753: a regular init container overlaps only the sidecars started before it."""
    app = container("app", {"cpu": "1"})
    sidecar = container("proxy", {"cpu": "1"}, sidecar=True)
    setup = container("setup", {"cpu": "4"})
    assert cpus(app, init=[setup, sidecar]) == 4  # max(app 1 + proxy 1, setup 4)
    assert cpus(app, init=[sidecar, setup]) == 5  # setup 4 runs beside proxy 1


def test_pod_overhead_is_added() -> None:
    app = container(requests={"cpu": "1", "memory": "1Gi"})
    overhead = {"cpu": "250m", "memory": "120Mi"}
    assert pod_resources(make_pod(app, overhead=overhead)) == PodResources(2, 1144, 0)


def test_pod_level_requests_replace_container_cpu_and_memory_but_not_gpus() -> None:
    app = container(requests={"cpu": "1", "memory": "1Gi"}, limits={GPU: "2"})
    pod_level = {"requests": {"cpu": "6"}, "limits": {"memory": "8Gi"}}
    assert pod_resources(make_pod(app, pod_level=pod_level)) == PodResources(6, 8192, 2)


def test_gpus_follow_the_same_rules_as_cpus() -> None:
    app = [container("a", limits={GPU: "1"}), container("b", limits={GPU: "2"})]
    assert pod_resources(make_pod(*app)).gpus == 3
    init = [container("burn-in", limits={GPU: "4"})]
    assert pod_resources(make_pod(*app, init=init)).gpus == 4


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        (container("web", {"cpu": "-1"}), f"{WEB}.requests.cpu"),
        (container("web", {"memory": "lots"}), f"{WEB}.requests.memory"),
        (container("web", limits={"memory": "1 Gi"}), f"{WEB}.limits.memory"),
        (container("web", limits={GPU: "0.5"}), f"{WEB}.limits.{GPU}"),
    ],
)
def test_bad_quantity_names_the_container_and_resource(bad: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidPodRequest) as raised:
        pod_resources(make_pod(container("ok", {"cpu": "1"}), bad))
    assert raised.value.field == field
    assert field in str(raised.value)


def test_bad_init_container_and_overhead_quantities_name_their_place() -> None:
    with pytest.raises(InvalidPodRequest, match=r"spec\.initContainers\[setup\]"):
        pod_resources(make_pod(init=[container("setup", {"cpu": "x"})]))
    with pytest.raises(InvalidPodRequest, match=r"spec\.overhead\.memory=\"-1Mi\""):
        pod_resources(make_pod(overhead={"memory": "-1Mi"}))


def test_error_message_says_what_a_quantity_looks_like() -> None:
    with pytest.raises(InvalidPodRequest, match="expected a non-negative Kubernetes quantity"):
        pod_resources(make_pod(container(requests={"cpu": "two"})))
