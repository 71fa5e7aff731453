"""The Workload API's groups (``scheduling.k8s.io``): a pod naming a PodGroup
(``spec.schedulingGroup.podGroupName``) and, from Kubernetes 1.37, a PodGroup that is one
child of a CompositePodGroup.

A gang PodGroup is a group of ``minCount``; a basic one is pod by pod.  A composite's child
PodGroups are one group of several parts: the composite is the group, each child PodGroup
template of the Workload's composite template one component of one Slurm heterogeneous job
(bridge/jobs/components.py), in the Workload's order, sized by the template's ``minCount``.
Slurm starts every component of a heterogeneous job together, so only a composite that asks
for all its child groups at once can be one.
"""

from admission.membership import Membership, group_name, index, ranked
from admission.owners import (
    COMPOSITE_POD_GROUP,
    POD_GROUP,
    WORKLOAD,
    CompositePodGroupObject,
    OwnerReader,
    PodGroupObject,
    WorkloadError,
    WorkloadObject,
    load,
)
from bridge import keys


async def pod_group(
    namespace: str, name: str, annotations: dict[str, str], read: OwnerReader
) -> Membership | None:
    """The group of a pod naming PodGroup ``name``; None: a basic policy (pod by pod)."""
    ref = f"PodGroup {namespace}/{name}"
    gang = await load(read, POD_GROUP, PodGroupObject, namespace, name)
    own = index(annotations, keys.JOB_COMPLETION_INDEX, "pod annotation")
    if gang.spec.parent:
        return await _composite(namespace, ref, gang, own, read)
    policy = gang.spec.scheduling_policy.gang
    if policy is None:  # basic policy: scheduled pod by pod
        return None
    size = policy.min_count
    return Membership(group_name(name), size, ranked(own, size), ref,
                      asks=_one_domain(ref, _domains(gang), size))


def _domains(group: PodGroupObject | CompositePodGroupObject) -> list[str]:
    """The topology label keys whose one domain the group's pods are to share."""
    constraints = group.spec.scheduling_constraints
    return [t.key for t in constraints.topology] if constraints else []


def _one_domain(ref: str, domain_keys: list[str], size: int) -> dict[str, str]:
    """All members within one domain of a topology label: one leaf switch (tree) or one block
    (block), whichever the partition's topology reads; Slurm takes both asks anywhere."""
    if not domain_keys:
        return {}
    key = domain_keys[0]
    if not key.startswith(keys.TOPOLOGY_LABEL_PREFIX):
        raise WorkloadError(
            f"{ref} asks its pods to share one {key}: Slurm places the group by its own network "
            f"topology, which Nodes carry as {keys.TOPOLOGY_LABEL_PREFIX}<topology> labels; "
            "use such a key (kubectl get nodes --show-labels)"
        )
    return {keys.SWITCHES: "1", keys.SEGMENT: str(size)}


async def _composite(
    namespace: str, ref: str, child: PodGroupObject, own: int | None, read: OwnerReader
) -> Membership:
    """The composite ``child`` belongs to as one group, this member in its template's part."""
    name = child.spec.parent or ""
    where = f"CompositePodGroup {namespace}/{name}"
    composite = await load(read, COMPOSITE_POD_GROUP, CompositePodGroupObject, namespace, name)
    spec = composite.spec
    if spec.parent:
        raise WorkloadError(
            f"{where} is nested in CompositePodGroup {namespace}/{spec.parent}: a Slurm "
            f"heterogeneous job has one level of components; point {ref}'s "
            "spec.parentCompositePodGroupName at a top-level composite (one without a parent)"
        )
    if shared := _domains(composite):
        raise WorkloadError(
            f"{where} asks its child groups to share one {shared[0]} "
            "(spec.schedulingConstraints), but they run as one Slurm heterogeneous job and "
            "Slurm keeps no heterogeneous job's components within one unit (each component's "
            "switches and segment are its own): put the constraint on its child PodGroups, "
            "each kept within one unit of its own, or on none"
        )
    workload, parts = await _child_templates(namespace, where, composite, read)
    gang = spec.scheduling_policy.gang
    if gang is None or gang.min_group_count != len(parts):
        asked = ("has a basic scheduling policy (each child group on its own)" if gang is None
                 else f"asks for {gang.min_group_count} of its {len(parts)} child groups")
        raise WorkloadError(
            f"{where} {asked}, but its groups run as one Slurm heterogeneous job whose "
            "components Slurm starts together: set schedulingPolicy.gang.minGroupCount to "
            f"{len(parts)} in it and in Workload {namespace}/{workload}'s template"
        )
    named = child.spec.workload_ref
    chosen = named.template_name if named and named.workload_name == workload else ""
    names = [n for n, _ in parts]
    if chosen not in names:
        said = f"template {named.template_name} of Workload {namespace}/{named.workload_name}" \
            if named else "no template"
        raise WorkloadError(
            f"{ref} names {said} (spec.workloadRef), not one of {where}'s child PodGroup "
            f"templates in Workload {namespace}/{workload} ({', '.join(names)}): name one of them"
        )
    at = names.index(chosen)
    offset, size = sum(s for _, s in parts[:at]), parts[at][1]
    rank = ranked(own, size)
    return Membership(group_name(name), sum(s for _, s in parts),
                      None if rank is None else offset + rank, where,
                      asks=_one_domain(ref, _domains(child), size),
                      components=tuple(parts), component=chosen)


async def _child_templates(
    namespace: str, where: str, composite: CompositePodGroupObject, read: OwnerReader
) -> tuple[str, list[tuple[str, int]]]:
    """The Workload the composite was made from and its child PodGroup templates, (name,
    gang minCount) each in the Workload's order."""
    wanted = composite.spec.workload_ref
    if wanted is None or not wanted.workload_name:
        raise WorkloadError(f"{where} names no Workload (spec.workloadRef): set the Workload "
                            "and the compositePodGroupTemplate it was made from")
    workload = await load(read, WORKLOAD, WorkloadObject, namespace, wanted.workload_name)
    ref = f"Workload {namespace}/{wanted.workload_name}"
    template = next((t for t in workload.spec.composite_templates
                     if t.name == wanted.template_name), None)
    if template is None:
        raise WorkloadError(
            f"{ref} has no compositePodGroupTemplate {wanted.template_name}, which {where} "
            "names (spec.workloadRef.templateName): name one of the Workload's templates"
        )
    if template.nested or not template.pod_group_templates:
        raise WorkloadError(
            f"{ref}'s compositePodGroupTemplate {template.name}, which {where} was made from, "
            f"holds {'composite templates' if template.nested else 'no PodGroup templates'}: "
            "a Slurm heterogeneous job has one level of components, one per gang PodGroup; "
            "list only podGroupTemplates in it"
        )
    parts = []
    for pgt in template.pod_group_templates:
        gang = pgt.scheduling_policy.gang
        if gang is None:
            raise WorkloadError(
                f"PodGroup template {pgt.name} of {where}'s template {template.name} ({ref}) "
                "has no gang policy: each child group is one component of a Slurm "
                "heterogeneous job, its members started together; give it "
                "schedulingPolicy.gang.minCount"
            )
        parts.append((pgt.name, gang.min_count))
    return wanted.workload_name, parts
