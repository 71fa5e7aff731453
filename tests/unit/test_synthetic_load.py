"""The offline benchmarks (B3, B4) time a bridge that believes its synthetic jobs: were the
job index to ignore them (as it ignores forged placeholders), they would time nothing."""

from pathlib import Path

from benchmarks import synthetic


def test_the_offline_bridge_believes_every_synthetic_job(tmp_path: Path) -> None:
    bridge, kube = synthetic.offline_bridge(tmp_path)
    synthetic.load(bridge, kube, jobs=12, nodes=3, pods=True)
    assert len(bridge.index.live()) == 12
    assert kube.writes == 0, "the steady state writes nothing"
