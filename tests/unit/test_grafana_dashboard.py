"""The Grafana dashboard only charts metrics the bridge actually exports (its Slurm rows:
slurmctld's own, checked against a real slurmctld by tests/e2e/test_monitoring.py)."""

import json
import re
from pathlib import Path

from prometheus_client import REGISTRY

import bridge.metrics  # noqa: F401 - registers the metrics
from admission import telemetry

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "slurmbridge-dashboard.json"


def test_every_dashboard_query_names_an_exported_metric() -> None:
    families = [*REGISTRY.collect(), *telemetry.REGISTRY.collect()]  # extender's, webhook's
    exported = {
        sample.name
        for family in families
        for sample in family.samples
        if sample.name.startswith("slurmbridge_")
    } | {f.name for f in families if f.name.startswith("slurmbridge_")}
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


def _queries() -> list[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    panels += [inner for row in panels for inner in row.get("panels", [])]
    return [t["expr"] for p in panels for t in p.get("targets", [])]


def test_namespace_and_instance_variables_filter_every_bridge_query() -> None:
    """Two releases (two Slurm clusters) in one Prometheus: the panels show one, not the sum."""
    variables = {v["name"]: v for v in json.loads(DASHBOARD.read_text())["templating"]["list"]}
    for name in ("namespace", "instance"):
        assert name in variables, f"no ${name} variable: {sorted(variables)}"
        var = variables[name]
        assert var["type"] == "query" and var["includeAll"] and var["allValue"] == ".*"
        assert var["datasource"]["uid"] == "${datasource}"
        assert name in json.dumps(var["query"])
    for expr in _queries():
        for selector in re.findall(r"(slurmbridge_[a-z_]+)(\{[^}]*\})?", expr):
            assert 'namespace=~"$namespace"' in selector[1], f"no namespace filter: {expr}"
            assert 'instance=~"$instance"' in selector[1], f"no instance filter: {expr}"
        for selector in re.findall(r"\{__name__=~[^}]*\}", expr):
            assert 'namespace=~"$namespace"' in selector, f"no namespace filter: {expr}"
        for _, selector in re.findall(r'(?<![\w"])(slurm_[a-z_]+)(\{[^}]*\})?', expr):
            assert 'namespace=~"$namespace"' in selector, f"no namespace filter: {expr}"


def test_import_metadata_names_the_prometheus_datasource() -> None:
    """Grafana's Import asks for the datasource ``__inputs`` declares and fills it in."""
    dashboard = json.loads(DASHBOARD.read_text())
    (ds,) = [i for i in dashboard["__inputs"] if i["type"] == "datasource"]
    assert ds["pluginId"] == "prometheus"
    required = {(r["type"], r["id"]) for r in dashboard["__requires"]}
    assert {("grafana", "grafana"), ("datasource", "prometheus")} <= required
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["current"]["value"] == "${" + ds["name"] + "}"
    assert "${" + ds["name"] + "}" not in json.dumps(dashboard["panels"]), \
        "panels go through $datasource, so a provisioned dashboard works too"
