"""The owner's text form is what older bridges wrote into Slurm comments, pod annotations
and group claim Lease names: a restarted or upgraded bridge must find the same jobs and
claims, so the text is pinned byte for byte."""

import pytest
from lightkube.models.core_v1 import Pod
from lightkube.models.meta_v1 import ObjectMeta

from bridge import keys
from bridge.jobs.owner import GroupOwner, PodOwner, owner_text, parse_owner
from bridge.link.ownership import owner_key
from bridge.link.views import view_of
from bridge.slurm.convert import comment_for, owner_from_comment
from slurmbridge_devkit.builders import PodBuilder

UID = "6f1c0a9e-1b2c-4d5e-8f90-123456789abc"


def test_owners_are_written_as_every_earlier_bridge_wrote_them() -> None:
    assert comment_for(PodOwner(UID)) == f"slurmbridge.io/pod-uid={UID}"
    group = GroupOwner("research", "train")
    assert comment_for(group) == "slurmbridge.io/pod-uid=group:research/train"
    assert str(GroupOwner("research", "train")) == "group:research/train"


def test_recorded_owners_are_read_back_as_the_same_owner() -> None:
    for owner in (PodOwner(UID), GroupOwner("research", "train")):
        assert parse_owner(owner_text(owner)) == owner
        assert owner_from_comment(f"user note {comment_for(owner)}") == owner
    assert owner_from_comment("slurmbridge.io/pod-uid=") is None  # no owner: a native job
    assert owner_from_comment("no marker") is None


def test_text_the_bridge_never_writes_stays_an_owner_no_pod_has() -> None:
    """A forged or damaged ``group:`` text is not a group: its job stays an orphan."""
    for text in ("group:", "group:research", "group:/train", "group:research/"):
        assert parse_owner(text) == PodOwner(text)
        assert owner_text(parse_owner(text)) == text


def test_an_older_bridges_pod_annotation_names_the_owner() -> None:
    pod = PodBuilder("p", "research").uid(UID).annotate(keys.OWNER, "group:research/train").build()
    assert owner_key(pod) == GroupOwner("research", "train")


def test_a_pod_is_read_once_into_where_it_is_and_whose_job_it_waits_on() -> None:
    linked = view_of(PodBuilder("w-0", "research").uid(UID).group("other")
                      .annotate(keys.OWNER, "group:research/train").build())
    # relabelled after its job was recorded: the recorded owner stands
    assert (linked.namespace, linked.name, linked.uid, linked.owner) == (
        "research", "w-0", UID, GroupOwner("research", "train"))
    assert str(linked) == "research/w-0"
    with pytest.raises(ValueError, match=r"metadata\.name"):
        view_of(Pod(metadata=ObjectMeta(namespace="research", uid=UID)))
