"""A mixed group's one job: a Slurm heterogeneous job, one component per part of the group.

Each component is asked for as one of its live members asks (bridge/jobs/components.py:
nodes = the component's size), with the tenancy of that member's namespace filled in, so
the account, partition and QOS are on every component.  Slurm starts the components
together and gives each nodes of its own.  A group whose parts all ask alike (an LWS whose
leader is a worker like the others) stays an ordinary job of ``size`` nodes.  Until a member
of every component exists the job waits: built from fewer, it would miss a part.  A topology
ask (``--switches``, ``--segment``) is each component's own, as Slurm applies it to a
heterogeneous job: a segment must divide its component's nodes, checked once the job's shape
is known.
"""

import dataclasses
from collections.abc import Callable, Sequence

from lightkube.models.core_v1 import Pod

from bridge.jobs.components import group_components
from bridge.jobs.group_ask import component_of, counted
from bridge.jobs.request import JobRequest
from bridge.jobs.translate import check_segment, job_request_for_pod
from bridge.placement.outcomes import Pending


def group_request(
    pod: Pod, request: JobRequest, members: Sequence[Pod], admit: Callable[[Pod], Pod],
) -> JobRequest:
    """The group's job from ``request`` (``pod``'s, admitted) and its listed ``members``
    (each admitted by ``admit`` before its ask is read); raises Pending while a component
    has no member yet, and whatever ``admit`` or the translation raise."""
    meta = pod.metadata
    components = group_components(meta.labels if meta else None,
                                  meta.annotations if meta else None)
    if components is None:
        return request
    live = [p for p in members if counted(p)]
    asks = []
    for part in components.parts:
        member = next((p for p in live if component_of(p) == part.name), None)
        if member is None:
            raise Pending(f"waiting: component {part.name} of this pod's group has no member "
                          "yet; its job asks Slurm for every component at once")
        ask = job_request_for_pod(admit(member))
        asks.append(dataclasses.replace(ask, name=request.name, owner=request.owner))
    size = sum(p.size for p in components.parts)
    if all(_shape(a) == _shape(asks[0]) for a in asks):
        check_segment(request.placement.topology, size)
        return dataclasses.replace(request, nodes=size)
    for part, ask in zip(components.parts, asks, strict=True):
        check_segment(ask.placement.topology, ask.nodes, part.name)
    return dataclasses.replace(request, nodes=size, components=tuple(asks))


def _shape(ask: JobRequest) -> JobRequest:
    """What a component asks for per node: its node count aside."""
    return dataclasses.replace(ask, nodes=1)
