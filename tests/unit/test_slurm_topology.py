"""What slurmrestd shows of Slurm's network topology: a node's units (Slurm 25.05+)."""

from bridge.slurm.convert import slurm_node, topology_units
from bridge.slurm.wire.base import NodesResponse


def test_a_nodes_units_are_read_as_slurmrestd_26_05_sends_them() -> None:
    # Trimmed from GET /slurm/v0.0.44/nodes/ of the recipe's 26.05 (NodeName ... Topology=).
    body = ('{"nodes": [{"name": "node3", "state": ["IDLE"], "cpus": 64, "real_memory": 262144,'
            ' "gres": "gpu:8,shard:32", "topology": "tree:leaf2,block:b2"},'
            ' {"name": "node9", "state": ["IDLE"], "topology": ""}]}')
    nodes = [slurm_node(n) for n in NodesResponse.model_validate_json(body).nodes]
    assert nodes[0].topology == (("tree", "leaf2"), ("block", "b2"))
    assert nodes[1].topology == ()


def test_24_11s_nodes_without_the_field_have_no_units() -> None:
    body = '{"nodes": [{"name": "node1", "state": ["IDLE"]}]}'
    assert slurm_node(NodesResponse.model_validate_json(body).nodes[0]).topology == ()


def test_a_part_without_a_unit_is_skipped() -> None:
    assert topology_units(" tree:leaf1 , block, :x,") == (("tree", "leaf1"),)
