"""Kubernetes 1.37's CompositePodGroup (issue 43, item 6): a pod whose PodGroup has a parent
composite joins the composite's group, one Slurm heterogeneous job component per child
PodGroup template, in the Workload's order.

Objects are shaped as the API server returns them (scheduling.k8s.io v1alpha3
CompositePodGroup, v1beta1 Workload and PodGroup), served by test_workloads' fake reader.
"""

import re
from typing import Any

import pytest

from admission.membership import Membership
from admission.owners import COMPOSITE_POD_GROUP, POD_GROUP, WORKLOAD, Kind, WorkloadError
from admission.pod import PodShape
from admission.workloads import membership
from bridge import keys
from tests.unit.test_workloads import NS, Owners, pod

COMPOSITE = f"CompositePodGroup {NS}/train-job"
GANG2: dict[str, Any] = {"gang": {"minGroupCount": 2}}


def pod_group_template(name: str, min_count: int | None) -> dict[str, Any]:
    policy = {"gang": {"minCount": min_count}} if min_count else {"basic": {}}
    return {"name": name, "schedulingPolicy": policy}


def workload(*children: tuple[str, int | None], policy: dict[str, Any] | None = None,
             template: str = "job") -> tuple[Kind, dict[str, Any]]:
    """Workload 'train' with one composite template of the child templates ``children``."""
    children = children or (("launcher", 1), ("workers", 2))
    return WORKLOAD, {"metadata": {"name": "train"}, "spec": {"compositePodGroupTemplates": [{
        "name": template, "schedulingPolicy": policy or GANG2,
        "podGroupTemplates": [pod_group_template(n, c) for n, c in children]}]}}


def composite(policy: dict[str, Any] | None = None, *, name: str = "train-job",
              parent: str | None = None) -> tuple[Kind, dict[str, Any]]:
    spec: dict[str, Any] = {"workloadRef": {"workloadName": "train", "templateName": "job"},
                            "schedulingPolicy": policy or GANG2}
    if parent is not None:
        spec["parentCompositePodGroupName"] = parent
    return COMPOSITE_POD_GROUP, {"metadata": {"name": name}, "spec": spec}


def child(
    template: str, min_count: int, *, parent: str = "train-job"
) -> tuple[Kind, dict[str, Any]]:
    """A child PodGroup ``train-job-<template>`` of the composite, as a controller makes it."""
    return POD_GROUP, {"metadata": {"name": f"train-job-{template}"}, "spec": {
        "parentCompositePodGroupName": parent,
        "workloadRef": {"workloadName": "train", "templateName": template},
        "schedulingPolicy": {"gang": {"minCount": min_count}}}}


def member(template: str, index: int | None = None) -> PodShape:
    annotations = {keys.JOB_COMPLETION_INDEX: str(index)} if index is not None else {}
    return pod(pod_group_name=f"train-job-{template}", annotations=annotations)


def _with_nested_template(found: tuple[Kind, dict[str, Any]]) -> tuple[Kind, dict[str, Any]]:
    """The Workload's composite template holding a composite template of its own, too."""
    found[1]["spec"]["compositePodGroupTemplates"][0]["compositePodGroupTemplates"] = [
        {"name": "inner", "schedulingPolicy": GANG2,
         "podGroupTemplates": [pod_group_template("ps", 1)]}]
    return found


def owners(*objects: tuple[Kind, dict[str, Any]]) -> Owners:
    return Owners(*(objects or (workload(), composite(), child("launcher", 1),
                                child("workers", 2))))


async def test_a_composites_child_pod_groups_are_its_components_in_the_workloads_order() -> None:
    parts = (("launcher", 1), ("workers", 2))
    found = {t: await membership(member(t, i), NS, owners())
             for t, i in (("launcher", 0), ("workers", 1))}
    assert found == {
        "launcher": Membership("train-job", 3, 0, COMPOSITE, components=parts,
                               component="launcher"),
        "workers": Membership("train-job", 3, 2, COMPOSITE, components=parts,
                              component="workers"),
    }
    # Without an index (or one beyond its component) a member takes any of its component's nodes.
    for index in (None, 2):
        unranked = await membership(member("workers", index), NS, owners())
        assert unranked is not None and (unranked.rank, unranked.component) == (None, "workers")


async def test_the_workloads_template_order_sets_the_ranks_and_sizes_not_the_pod_groups() -> None:
    read = owners(workload(("workers", 2), ("launcher", 1)), composite(),
                  child("launcher", 1), child("workers", 5))
    found = await membership(member("launcher", 0), NS, read)
    assert found is not None
    assert (found.size, found.rank, found.components) == (3, 2, (("workers", 2), ("launcher", 1)))


async def test_a_pod_group_made_from_another_workload_is_refused_naming_both() -> None:
    stray = child("workers", 2)
    stray[1]["spec"]["workloadRef"]["workloadName"] = "other"
    read = owners(workload(), composite(), child("launcher", 1), stray)
    words = (f"PodGroup {NS}/train-job-workers names template workers of Workload {NS}/other "
             f"(spec.workloadRef), not one of {COMPOSITE}'s child PodGroup templates in "
             f"Workload {NS}/train (launcher, workers)")
    with pytest.raises(WorkloadError, match=re.escape(words)):
        await membership(member("workers", 0), NS, read)


async def test_a_long_composite_name_becomes_a_valid_label_value() -> None:
    long_name = "c" * 100
    read = owners(workload(), composite(name=long_name),
                  child("launcher", 1, parent=long_name), child("workers", 2, parent=long_name))
    found = await membership(member("launcher", 0), NS, read)
    assert found is not None and len(found.name) <= 63 and found.name.startswith("c" * 40)


@pytest.mark.parametrize(("objects", "words"), [
    ((workload(policy={"basic": {}}), composite({"basic": {}})),
     f"{COMPOSITE} has a basic scheduling policy"),
    ((workload(policy={"gang": {"minGroupCount": 1}}), composite({"gang": {"minGroupCount": 1}})),
     f"{COMPOSITE} asks for 1 of its 2 child groups"),
    ((workload(("launcher", 1), ("workers", None)), composite()),
     f"PodGroup template workers of {COMPOSITE}'s template job (Workload {NS}/train) has no gang"),
    ((workload(), composite(parent="outer")),
     f"{COMPOSITE} is nested in CompositePodGroup {NS}/outer"),
    ((workload(("launcher", 1), ("ps", 2)), composite()),
     f"PodGroup {NS}/train-job-workers names template workers of Workload {NS}/train "
     "(spec.workloadRef), not one of"),
    ((_with_nested_template(workload()), composite()),
     f"Workload {NS}/train's compositePodGroupTemplate job, which {COMPOSITE} was made from, "
     "holds composite templates"),
    ((workload(template="other"), composite()),
     f"Workload {NS}/train has no compositePodGroupTemplate job"),
], ids=["basic", "min-group-count", "child-basic", "nested", "unknown-template", "nested-template",
     "no-template"])
async def test_a_composite_slurm_cannot_start_as_one_job_is_refused_naming_it(
    objects: tuple[tuple[Kind, dict[str, Any]], ...], words: str
) -> None:
    read = owners(*objects, child("launcher", 1), child("workers", 2))
    with pytest.raises(WorkloadError, match=re.escape(words)):
        await membership(member("workers", 0), NS, read)


# --- topology (issue 43, item 5): a child's constraint is its own component's ---------------

SAME_LEAF = {"topology": [{"key": keys.TOPOLOGY_LABEL_PREFIX + "tree"}]}


def _constrained(found: tuple[Kind, dict[str, Any]]) -> tuple[Kind, dict[str, Any]]:
    found[1]["spec"]["schedulingConstraints"] = SAME_LEAF
    return found


async def test_a_child_pod_groups_topology_constraint_is_its_own_components_ask() -> None:
    """Slurm keeps each component of a heterogeneous job within its own leaf switch or block
    (its ``--switches``/``--segment``): the workers' constraint asks it of their component, of
    their 2 nodes; the launcher asks nothing."""
    read = owners(workload(), composite(), child("launcher", 1), _constrained(child("workers", 2)))
    workers = await membership(member("workers", 0), NS, read)
    launcher = await membership(member("launcher", 0), NS, read)
    assert workers is not None and launcher is not None
    assert workers.asks == {keys.SWITCHES: "1", keys.SEGMENT: "2"}
    assert launcher.asks == {}


async def test_a_child_constraint_on_a_key_slurm_does_not_know_is_refused_naming_it() -> None:
    rack = child("workers", 2)
    rack[1]["spec"]["schedulingConstraints"] = {
        "topology": [{"key": "topology.kubernetes.io/rack"}]}
    read = owners(workload(), composite(), child("launcher", 1), rack)
    with pytest.raises(WorkloadError, match=re.escape(
            f"PodGroup {NS}/train-job-workers asks its pods to share one "
            "topology.kubernetes.io/rack")):
        await membership(member("workers", 0), NS, read)


async def test_a_topology_constraint_on_the_composite_itself_is_refused() -> None:
    """All components within one unit: Slurm applies a heterogeneous job's switches and
    segment per component, never across them; the refusal says where to put it instead."""
    read = owners(workload(), _constrained(composite()), child("launcher", 1),
                  child("workers", 2))
    with pytest.raises(WorkloadError) as refused:
        await membership(member("workers", 0), NS, read)
    message = str(refused.value)
    for words in (f"{COMPOSITE} asks its child groups to share one "
                  f"{keys.TOPOLOGY_LABEL_PREFIX}tree (spec.schedulingConstraints)",
                  "Slurm keeps no heterogeneous job's components within one unit",
                  "put the constraint on its child PodGroups"):
        assert words in message, (words, message)
