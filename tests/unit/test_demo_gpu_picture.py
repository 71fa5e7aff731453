"""README's GPU map picture is drawn from ``slurmbridge gpus -o json`` as the demo prints it."""

import importlib.util
import json
from pathlib import Path

from bridge.gpumap.model import Gpu, GpuMap, Holder, Kind, NodeMap
from slurmbridge_cli.gpumap_text import as_data

SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "demo" / "gpu_picture.py"


def _draw() -> object:
    spec = importlib.util.spec_from_file_location("gpu_picture", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.draw


def test_the_map_the_demo_prints_is_drawn_as_a_png(tmp_path: Path) -> None:
    gpu_map = GpuMap([
        NodeMap("node1", "kube-node1", [
            Gpu(0, holders=[Holder(Kind.NATIVE, 1, user="slurm")]),
            Gpu(1, holders=[Holder(Kind.PLACEHOLDER, 3, namespace="demo",
                                   pods=["demo/train-gpu"])]),
            Gpu(2),
        ]),
        NodeMap("node2", "kube-node2", [Gpu(0), Gpu(1)]),
    ])
    printed = json.loads(json.dumps(as_data(gpu_map)))  # as `-o json` prints it
    out = tmp_path / "map.png"
    _draw()(printed, out)  # type: ignore[operator]
    assert out.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
