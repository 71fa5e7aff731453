"""Ephemeral containers (`kubectl debug`: the pods/ephemeralcontainers subresource) added to a
pod the bridge places.

Such a container starts on the node Slurm chose, beside the pod's own: it must see the GPUs
Slurm gave the pod's job and no others.  Without a GPU variable of its own, the image's
(NVIDIA's CUDA images set ``NVIDIA_VISIBLE_DEVICES=all``) would choose, so the mutating webhook
gives each new one the pod's downward-API variables; one that names its own is refused, with
the reason, rather than silently changed (a person typed it).  Ephemeral containers cannot
ask for resources (the API server refuses ``resources`` on them), so these variables are
their only way to a device.  The ValidatingAdmissionPolicy ``<release>-ephemeral-containers``
holds the same rule where the webhooks are not called.
"""

from admission.mutate import GPU_ENV, PatchOp, pointer
from admission.pod import Container, PodShape
from bridge import keys

_WANTED = {e["name"]: e for e in GPU_ENV}


def placed_by_bridge(pod: PodShape) -> bool:
    """Ephemeral containers are the bridge's concern only in pods Slurm places."""
    return pod.spec.scheduler_name == keys.SCHEDULER_NAME


def _added(pod: PodShape, old: PodShape) -> list[tuple[int, Container]]:
    """The ephemeral containers this request adds (existing ones can no longer change)."""
    before = {c.name for c in old.spec.ephemeral_containers or []}
    return [(i, c) for i, c in enumerate(pod.spec.ephemeral_containers or [])
            if c.name not in before]


def _env(container: Container) -> list[PatchOp]:
    return [e.model_dump(by_alias=True, exclude_unset=True) for e in container.env or []]


def patch_for(pod: PodShape, old: PodShape) -> list[PatchOp]:
    """The pod's GPU variables for each new ephemeral container lacking them (first, so the
    container's own variables may reference them); any it names itself are left to
    ``refusal``."""
    ops: list[PatchOp] = []
    for index, container in _added(pod, old):
        env = _env(container)
        named = {e["name"] for e in env}
        missing = [e for name, e in _WANTED.items() if name not in named]
        if missing:
            path = pointer("spec", "ephemeralContainers", index, "env")
            ops.append({"op": "add", "path": path, "value": missing + env})
    return ops


def refusal(pod: PodShape, old: PodShape, namespace: str) -> str | None:
    """Why the new ephemeral containers may not start, or None."""
    own: dict[str, list[str]] = {}
    bare: list[str] = []
    for _, container in _added(pod, old):
        env = _env(container)
        if chosen := sorted({e["name"] for e in env if e["name"] in _WANTED} - _kept(env)):
            own[container.name] = chosen
        if not _WANTED.keys() <= {e["name"] for e in env}:
            bare.append(container.name)
    where = f"pod {namespace}/{pod.metadata.name} runs on the GPUs Slurm gave its job"
    if own:
        named = "; ".join(f"{c}: {', '.join(v)}" for c, v in own.items())
        return (
            f"ephemeral container(s) set their own GPU variables ({named}): {where} "
            f"(annotation {keys.GPU_IDS}), and a container added to it sees those and no "
            "others; remove these variables, slurmbridge sets them"
        )
    if bare:
        return (
            f"ephemeral container(s) {', '.join(bare)} lack the GPU variables "
            f"{', '.join(_WANTED)} that the slurmbridge mutating webhook adds: {where} "
            f"(annotation {keys.GPU_IDS}), and without them the image's own (CUDA images: "
            "NVIDIA_VISIBLE_DEVICES=all) would expose every GPU of the node; retry once the "
            "webhook answers"
        )
    return None


def _kept(env: list[PatchOp]) -> set[str]:
    """The GPU variables of ``env`` that are exactly the bridge's, with no second entry."""
    by_name: dict[str, list[PatchOp]] = {}
    for e in env:
        by_name.setdefault(e["name"], []).append(e)
    return {name for name, entries in by_name.items()
            if name in _WANTED and all(_same(e, _WANTED[name]) for e in entries)}


def _same(entry: PatchOp, wanted: PatchOp) -> bool:
    """Equal up to the fieldRef's apiVersion, which the API server defaults."""
    ref = entry.get("valueFrom", {}).get("fieldRef", {})
    return set(entry) == {"name", "valueFrom"} and set(entry["valueFrom"]) == {"fieldRef"} \
        and ref.get("fieldPath") == wanted["valueFrom"]["fieldRef"]["fieldPath"] \
        and ref.get("apiVersion", "v1") == "v1"
