"""The filter answer written as bytes decodes exactly as the model's own serialisation did
(what FastAPI sent before: ``ExtenderFilterResult`` by alias), and the request model reads
only the pod's identity."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.placement.outcomes import Outcome, Verdict
from extender.wire import ExtenderArgs, ExtenderFilterResult, filter_result_json

NODES = [f"kube-node{k}" for k in range(1, 6)]


def _model_answer(keep: list[str], unresolvable: dict[str, str]) -> object:
    """The answer as the app serialised it before (the response_model path)."""
    result = ExtenderFilterResult(node_names=keep, failed_and_unresolvable=unresolvable)
    return json.loads(result.model_dump_json(by_alias=True))


def _failed_map(keep: list[str], candidates: list[str], reason: str) -> dict[str, str]:
    """What kube-scheduler is told failed: every candidate when none is kept, else none."""
    return {} if keep else dict.fromkeys(candidates, reason)


@pytest.mark.parametrize(("keep", "candidates", "reason"), [
    (["kube-node3"], NODES, "Slurm placed this pod on kube-node3"),
    ([], NODES, "waiting for Slurm job 7 (Resources)"),
    ([], [], "nothing to place"),
    (["kube-node1"], ["kube-node1"], "Slurm placed this pod on kube-node1"),
    (["kube-node2"], ["kube-node2", "kube-node1", "kube-node2"], "dup"),
    (["a"], ["a", 'b"q', "c\\d", "e\nf", "ü-node"], 'says "no" — über\n'),
])
def test_bytes_decode_as_the_model_serialised(
    keep: list[str], candidates: list[str], reason: str
) -> None:
    verdict = Verdict(Outcome.ALLOCATED, keep=keep, candidates=candidates, reason=reason)
    new = json.loads(filter_result_json(verdict.keep, verdict.failed(), verdict.reason))
    failed = _failed_map(keep, candidates, reason)
    assert new == _model_answer(keep, failed)
    assert verdict.unresolvable == failed


@given(
    names=st.lists(st.text(max_size=12), max_size=8),
    reason=st.text(max_size=20),
    kept=st.integers(min_value=0, max_value=8),
)
def test_any_names_decode_the_same(names: list[str], reason: str, kept: int) -> None:
    keep = names[kept:kept + 1]
    verdict = Verdict(Outcome.ALLOCATED, keep=keep, candidates=names, reason=reason)
    new = json.loads(filter_result_json(verdict.keep, verdict.failed(), reason))
    assert new == _model_answer(keep, _failed_map(keep, names, reason))


def test_the_request_keeps_only_the_pods_identity() -> None:
    body = json.dumps({
        "Pod": {"metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": {"a": "b"},
                             "resourceVersion": "42"},
                "spec": {"containers": [{"name": "c", "image": "x"}]}},
        "NodeNames": NODES,
    })
    args = ExtenderArgs.model_validate_json(body)
    assert args.pod.metadata is not None
    assert (args.pod.metadata.namespace, args.pod.metadata.name, args.pod.metadata.uid) == (
        "ns", "p", "u")
    assert args.candidates() == NODES
    assert args.pod.model_dump() == {"metadata": {
        "name": "p", "namespace": "ns", "uid": "u", "resource_version": "42"}}
    assert args.pod.metadata.version == 42  # how new a cached copy must be to stand in
