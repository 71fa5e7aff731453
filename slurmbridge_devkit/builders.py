"""Pods for tests, benchmarks and the demo: one builder instead of one helper per file.

    PodBuilder("train").gpus(2).group("allreduce", 2).build()      # a lightkube Pod
    PodBuilder("p").cpu("2").annotate(keys.ACCOUNT, "physics").manifest()   # a dict

Defaults: one busybox container sleeping an hour, 1 CPU and 1 GiB requested (= limits),
``schedulerName: slurmbridge``, no grace period (deleted pods go at once).
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

    def gpus(self, count: int) -> Self:
        """``nvidia.com/gpu`` as the user writes it (the webhook moves it to an annotation)."""
        self._gpus = count
        return self

    def group(self, name: str, size: int) -> Self:
        """A member of pod group ``name`` of ``size`` pods: one Slurm job for all."""
        self._labels[keys.GROUP] = name
        self._labels[keys.GROUP_SIZE] = str(size)
        return self

    def scheduler(self, name: str | None) -> Self:
        """Another scheduler, or None to leave it to the webhook (enrolled namespaces)."""
        self._scheduler = name
        return self

    def label(self, key: str, value: str) -> Self:
        self._labels[key] = value
        return self

    def labels(self, values: dict[str, str]) -> Self:
        self._labels.update(values)
        return self

    def annotate(self, key: str, value: str) -> Self:
        self._annotations[key] = value
        return self

    def annotations(self, values: dict[str, str]) -> Self:
        self._annotations.update(values)
        return self

    def command(self, *argv: str, image: str | None = None) -> Self:
        self._command = list(argv)
        if image is not None:
            self._image = image
        return self

    def spec(self, **fields: Any) -> Self:
        """Any other PodSpec field, as the API spells it (``nodeName``, ``schedulingGates``...)."""
        self._spec.update(fields)
        return self

    def gated(self, *others: str) -> Self:
        """The bridge's scheduling gate, as the webhook adds it (after any ``others``)."""
        names = [*others, keys.SLURM_GATE]
        self._spec["schedulingGates"] = [{"name": n} for n in names]
        return self

    def manifest(self) -> dict[str, Any]:
        """The pod as the API takes it (a plain dict)."""
        limits: dict[str, str] = {}
        if self._cpu is not None:
            limits["cpu"] = self._cpu
        if self._memory is not None:
            limits["memory"] = self._memory
        if self._gpus:
            limits[keys.GPU_RESOURCE] = str(self._gpus)
        container: dict[str, Any] = {"name": "main", "image": self._image,
                                     "command": list(self._command)}
        if limits:
            container["resources"] = {"requests": dict(limits), "limits": limits}
        spec: dict[str, Any] = {"containers": [container], **copy.deepcopy(self._spec)}
        if self._scheduler is not None:
            spec["schedulerName"] = self._scheduler
        metadata: dict[str, Any] = {"name": self._name, "labels": dict(self._labels),
                                    "annotations": dict(self._annotations)}
        if self._namespace is not None:
            metadata["namespace"] = self._namespace
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}

    def build(self) -> Pod:
        """The pod as a lightkube model (what the Kubernetes client sends)."""
        return cast(Pod, Pod.from_dict(self.manifest()))
