"""A mixed group's components read from a member (issue 43): each member knows every
component, its size and its place; what cannot be a heterogeneous job is refused by name."""

import pytest

from bridge import keys
from bridge.jobs.components import Component, Components, group_components
from bridge.jobs.invalid_request import InvalidPodRequest
from bridge.jobs.translate import member_ask
from slurmbridge_devkit.builders import PodBuilder

GROUP = {keys.GROUP: "train", keys.GROUP_SIZE: "3"}
LISTED = {keys.GROUP_COMPONENTS: "launcher=1,workers=2"}
PARTS = (Component("launcher", 1, 0), Component("workers", 2, 1))


def test_a_member_knows_every_component_its_own_and_its_index_in_it() -> None:
    labels = {**GROUP, keys.GROUP_RANK: "2", keys.GROUP_COMPONENT: "workers"}
    found = group_components(labels, LISTED)
    assert found == Components(PARTS, PARTS[1])
    assert found.rank_in_own(2) == 1


def test_a_group_without_components_is_one() -> None:
    assert group_components(GROUP, {}) is None
    assert group_components(None, None) is None


@pytest.mark.parametrize(("labels", "annotations", "key", "says"), [
    ({**GROUP, keys.GROUP_COMPONENT: "workers"}, {}, keys.GROUP_COMPONENTS, "is missing"),
    ({keys.GROUP_COMPONENT: "workers"}, LISTED, keys.GROUP_COMPONENT, keys.GROUP_SIZE),
    ({**GROUP, keys.GROUP_COMPONENT: "driver"}, LISTED, keys.GROUP_COMPONENT,
     "launcher, workers"),
    ({**GROUP, keys.GROUP_COMPONENT: "workers"}, {keys.GROUP_COMPONENTS: "launcher=1,workers=3"},
     keys.GROUP_COMPONENTS, "add up to 4"),
    ({**GROUP, keys.GROUP_COMPONENT: "workers"}, {keys.GROUP_COMPONENTS: "a=1,a=2"},
     keys.GROUP_COMPONENTS, "launcher=1,workers=2"),
    ({**GROUP, keys.GROUP_COMPONENT: "workers"}, {keys.GROUP_COMPONENTS: "launcher=0,workers=3"},
     keys.GROUP_COMPONENTS, "sizes adding up"),
    ({**GROUP, keys.GROUP_COMPONENT: "launcher", keys.GROUP_RANK: "1"}, LISTED,
     keys.GROUP_RANK, "from 0 to 0"),
])
def test_what_cannot_be_a_component_is_refused_naming_the_key(
    labels: dict[str, str], annotations: dict[str, str], key: str, says: str
) -> None:
    with pytest.raises(InvalidPodRequest) as refused:
        group_components(labels, annotations)
    assert refused.value.field == key and says in str(refused.value), refused.value


def test_a_member_asks_for_its_components_nodes() -> None:
    worker = (PodBuilder("w", "ns").uid("u").labels(
        {**GROUP, keys.GROUP_COMPONENT: "workers"}).annotations(LISTED).build())
    plain = PodBuilder("p", "ns").uid("u").labels(GROUP).build()
    assert (member_ask(worker).nodes, member_ask(plain).nodes) == (2, 3)
