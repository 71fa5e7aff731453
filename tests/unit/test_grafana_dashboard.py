"""The Grafana dashboard only charts metrics the bridge actually exports (its Slurm rows:
slurmctld's own, checked against a real slurmctld by tests/e2e/test_monitoring.py)."""

import json
import re
from pathlib import Path

from prometheus_client import REGISTRY

import bridge.metrics  # noqa: F401 - registers the metrics

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "slurmbridge-dashboard.json"


def test_every_dashboard_query_names_an_exported_metric() -> None:
    exported = {
        sample.name
        for family in REGISTRY.collect()
        for sample in family.samples
        if sample.name.startswith("slurmbridge_")
    } | {f.name for f in REGISTRY.collect() if f.name.startswith("slurmbridge_")}
    panels = json.loads(DASHBOARD.read_text())["panels"]
    panels += [inner for row in panels for inner in row.get("panels", [])]  # collapsed rows
    used = {
        name
        for panel in panels
        for target in panel.get("targets", [])
        for name in re.findall(r"slurmbridge_[a-z_]+", target["expr"])
    }
    assert used, "the dashboard charts nothing"
    stems = {re.sub(r"_(bucket|count|sum|total|created)$", "", n) for n in exported}
    missing = {n for n in used if re.sub(r"_(bucket|count|sum|total)$", "", n) not in stems}
    assert not missing, f"dashboard uses metrics the bridge does not export: {missing}"
