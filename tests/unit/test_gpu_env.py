"""CUDA_VISIBLE_DEVICES as the container sees its GPUs (written by the binder)."""

import pytest

from bridge.link.bound import cuda_visible_devices


@pytest.mark.parametrize(
    ("gpu_ids", "renumbered", "physical"),
    [("4,5", "0,1", "4,5"), ("7", "0", "7"), ("0,1,2,3", "0,1,2,3", "0,1,2,3"), ("", "", "")],
)
def test_cuda_numbering(gpu_ids: str, renumbered: str, physical: str) -> None:
    # Under the NVIDIA runtime Slurm's GPUs 4,5 are the container's devices 0 and 1; with
    # every device mounted unrenumbered they keep their physical numbers; none stays none.
    assert cuda_visible_devices(gpu_ids, "renumbered") == renumbered
    assert cuda_visible_devices(gpu_ids, "physical") == physical
