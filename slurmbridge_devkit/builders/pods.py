"""Pods for tests, benchmarks and the demo: one builder instead of one helper per file.

    PodBuilder("train").gpus(2).group("allreduce", 2).build()      # a lightkube Pod
    PodBuilder("p").cpu("2").annotate(keys.ACCOUNT, "physics").manifest()   # a dict
    PodBuilder("p", "ns").uid("u1").node("node1").running().build()  # as the kubelet runs it
    PodBuilder("p", "ns").bare().spec(nodeName="n1").manifest()     # only what is named

Defaults: one busybox container sleeping an hour, 1 CPU and 1 GiB requested (= limits),
``schedulerName: slurmbridge``, no grace period (deleted pods go at once), no uid and no
status (what a create sends); the API server's and the kubelet's fields only when named.
"""

import copy
from typing import Any, Self, cast

from lightkube.resources.core_v1 import Pod

from bridge import keys


class PodBuilder:
    def __init__(self, name: str, namespace: str | None = None) -> None:
        self._name = name
        self._namespace = namespace
        self._cpu: str | None = "1"
        self._memory: str | None = "1Gi"
        self._gpus = 0
        self._scheduler: str | None = keys.SCHEDULER_NAME
        self._labels: dict[str, str] = {}
        self._annotations: dict[str, str] = {}
        self._image = "busybox"
        self._command = ["sleep", "3600"]
        self._spec: dict[str, Any] = {"terminationGracePeriodSeconds": 0}
        self._containers: list[dict[str, Any]] | None = None  # None: the default one
        self._metadata: dict[str, Any] = {}  # what the API server sets (uid, timestamps...)
        self._status: dict[str, Any] = {}
        self._limited = True  # CPU and memory limited as requested
        self._pull: str | None = None
        self._claims: list[str] = []  # DRA claims the default container uses
        self._bare = False
        self._named: set[str] = set()  # "labels", "annotations": named, kept when bare

    def namespace(self, namespace: str) -> Self:
        self._namespace = namespace
        return self

    def cpu(self, cpu: str | None) -> Self:
        """CPU request and limit; None: none at all."""
        self._cpu = cpu
        return self

    def memory(self, memory: str | None) -> Self:
        """Memory request and limit; None: none at all."""
        self._memory = memory
        return self

    def requests_only(self) -> Self:
        """CPU and memory requested, not limited (GPUs always both: Kubernetes wants an
        extended resource's request and limit equal)."""
        self._limited = False
        return self

    def gpus(self, count: int) -> Self:
        """``nvidia.com/gpu`` as the user writes it (the webhook moves it to an annotation)."""
        self._gpus = count
        return self

    def group(self, name: str, size: int | None = None) -> Self:
        """A member of pod group ``name`` of ``size`` pods: one Slurm job for all (no size:
        the label alone, as a group's size is found elsewhere or a test leaves it out)."""
        self._labels[keys.GROUP] = name
        if size is not None:
            self._labels[keys.GROUP_SIZE] = str(size)
        return self

    def pod_group(self, name: str) -> Self:
        """A member of the Workload API's PodGroup ``name`` (``spec.schedulingGroup``)."""
        self._spec["schedulingGroup"] = {"podGroupName": name}
        return self

    def owned_by(self, kind: str, name: str, *, uid: str = "job-uid",
                 api_version: str = "batch/v1") -> Self:
        """Created by controller ``kind``/``name`` (an owner reference with controller: true)."""
        self._metadata.setdefault("ownerReferences", []).append({
            "apiVersion": api_version, "kind": kind, "name": name, "uid": uid,
            "controller": True})
        return self

    def uid(self, uid: str) -> Self:
        """The uid the API server gives the pod (the bridge's owner of a lone pod's job)."""
        self._metadata["uid"] = uid
        return self

    def resource_version(self, version: str) -> Self:
        self._metadata["resourceVersion"] = version
        return self

    def created(self, stamp: str = "2026-01-01T00:00:00Z") -> Self:
        self._metadata["creationTimestamp"] = stamp
        return self

    def deleting(self, stamp: str = "2026-01-01T00:00:00Z") -> Self:
        """Deleted, still there (a finalizer or the kubelet's grace period holds it)."""
        self._metadata["deletionTimestamp"] = stamp
        return self

    def node(self, name: str) -> Self:
        """Bound to Kubernetes node ``name`` (``spec.nodeName``)."""
        self._spec["nodeName"] = name
        return self

    def phase(self, phase: str) -> Self:
        """``status.phase`` as the kubelet reports it (``Pending``, ``Running``, ``Failed``...)."""
        self._status["phase"] = phase
        return self

    def running(self, *, ready: bool = True) -> Self:
        """Running, its container started (``ready``: passing its readiness probe)."""
        self._status["phase"] = "Running"
        self._status["containerStatuses"] = [{
            "name": "main", "image": self._image, "imageID": "", "ready": ready,
            "restartCount": 0, "state": {"running": {}}}]
        return self

    def containers(self, *containers: dict[str, Any]) -> Self:
        """These containers as the API spells them, instead of the default one (whose
        resources ``cpu``, ``memory`` and ``gpus`` set)."""
        self._containers = [copy.deepcopy(c) for c in containers]
        return self

    def scheduler(self, name: str | None) -> Self:
        """Another scheduler, or None to leave it to the webhook (enrolled namespaces)."""
        self._scheduler = name
        return self

    def label(self, key: str, value: str) -> Self:
        return self.labels({key: value})

    def labels(self, values: dict[str, str]) -> Self:
        self._named.add("labels")
        self._labels.update(values)
        return self

    def annotate(self, key: str, value: str) -> Self:
        return self.annotations({key: value})

    def annotations(self, values: dict[str, str]) -> Self:
        self._named.add("annotations")
        self._annotations.update(values)
        return self

    def bare(self) -> Self:
        """Only what the test names: no resources, command, scheduler or grace period by
        default, no labels or annotations unless named (empty ones included). A pod as a user
        may write it: what the webhook and the resource count must cope with."""
        self._bare = True
        self._command = []
        return self.cpu(None).memory(None).scheduler(None).grace(None)

    def grace(self, seconds: int | None) -> Self:
        """``terminationGracePeriodSeconds``; None: left out (Kubernetes' default, 30 s)."""
        if seconds is None:
            self._spec.pop("terminationGracePeriodSeconds", None)
        else:
            self._spec["terminationGracePeriodSeconds"] = seconds
        return self

    def command(self, *argv: str, image: str | None = None) -> Self:
        self._command = list(argv)
        if image is not None:
            self._image = image
        return self

    def pull(self, policy: str) -> Self:
        """The default container's ``imagePullPolicy`` (``Never``: an image loaded on the nodes)."""
        self._pull = policy
        return self

    def claim(self, name: str, **source: str) -> Self:
        """DRA claim ``name``, used by the default container; ``source`` as the API spells it
        (``resourceClaimName=...`` or ``resourceClaimTemplateName=...``)."""
        self._spec.setdefault("resourceClaims", []).append({"name": name, **source})
        self._claims.append(name)
        return self

    def spec(self, **fields: Any) -> Self:
        """Any other PodSpec field, as the API spells it (``nodeName``, ``schedulingGates``...)."""
        self._spec.update(fields)
        return self

    def tolerate(self, key: str, effect: str = "NoSchedule") -> Self:
        """Tolerates taint ``key`` whatever its value (as the webhook tolerates the bridge's)."""
        self._spec.setdefault("tolerations", []).append(
            {"key": key, "operator": "Exists", "effect": effect})
        return self

    def gated(self, *others: str) -> Self:
        """The bridge's scheduling gate, as the webhook adds it (after any ``others``)."""
        names = [*others, keys.SLURM_GATE]
        self._spec["schedulingGates"] = [{"name": n} for n in names]
        return self

    def manifest(self) -> dict[str, Any]:
        """The pod as the API takes it (a plain dict)."""
        spec: dict[str, Any] = {"containers": self._container_list(), **copy.deepcopy(self._spec)}
        if self._scheduler is not None:
            spec["schedulerName"] = self._scheduler
        metadata: dict[str, Any] = {"name": self._name}
        if self._namespace is not None:
            metadata["namespace"] = self._namespace
        for field, values in (("labels", self._labels), ("annotations", self._annotations)):
            if values or field in self._named or not self._bare:
                metadata[field] = dict(values)
        metadata.update(copy.deepcopy(self._metadata))
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
        if self._status:
            pod["status"] = copy.deepcopy(self._status)
        return pod

    def _container_list(self) -> list[dict[str, Any]]:
        if self._containers is not None:
            return copy.deepcopy(self._containers)
        requests: dict[str, str] = {}
        if self._cpu is not None:
            requests["cpu"] = self._cpu
        if self._memory is not None:
            requests["memory"] = self._memory
        if self._gpus:
            requests[keys.GPU_RESOURCE] = str(self._gpus)
        limits = {k: v for k, v in requests.items()
                  if self._limited or k == keys.GPU_RESOURCE}
        resources: dict[str, Any] = {k: v for k, v in (("requests", requests),
                                                       ("limits", limits)) if v}
        if self._claims:
            resources["claims"] = [{"name": name} for name in self._claims]
        container: dict[str, Any] = {"name": "main", "image": self._image}
        if self._pull is not None:
            container["imagePullPolicy"] = self._pull
        if self._command:
            container["command"] = list(self._command)
        if resources:
            container["resources"] = resources
        return [container]

    def build(self) -> Pod:
        """The pod as a lightkube model (what the Kubernetes client sends)."""
        return cast(Pod, Pod.from_dict(self.manifest()))
