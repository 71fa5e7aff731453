"""Unified monitoring, checked for real: Debian's Prometheus scrapes the running bridge and,
on a Slurm that has them (>= 25.11: the 26.05 tier), slurmctld's own /metrics, while some of
the bridge's pods are bound and some wait in Slurm's queue; then every panel of the Grafana
dashboard must show data.  A panel whose query returns nothing fails the test, by name.

On Slurm 24.11 slurmctld has no metrics at all (no metrics plugin), so there the dashboard's
Slurm row cannot show anything: the test checks the bridge's row only, and says so in its
id (``[slurm-24.11]``).  On a newer Slurm it requires both rows, and fails naming slurmctld's
setting when its /metrics is not served."""

import asyncio
import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod

from bridge import keys
from slurmbridge_devkit.builders import PodBuilder
from slurmbridge_devkit.e2e import create_pod, quiet_namespace, wait_bound
from slurmbridge_devkit.kube import REPO
from slurmbridge_devkit.prometheus import (
    Prometheus,
    run_prometheus,
    scrape_job,
    slurmctld_scrape_job,
)
from slurmbridge_devkit.slurm import SlurmTarget
from slurmbridge_devkit.stack import BridgeStack, NamespaceFactory
from slurmbridge_devkit.waiting import wait_for

pytestmark = pytest.mark.e2e

DASHBOARD = REPO / "deploy" / "grafana" / "slurmbridge-dashboard.json"
SLURMCTLD_METRICS_SINCE = (25, 11)  # the first Slurm with MetricsType=metrics/openmetrics
# Grafana's own variables, as Grafana would fill them in for this short run: a rate window
# that holds the whole run (Prometheus scrapes every second here), a step, the range.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__interval": "15s", "$__range": "1h"}
GPUS_PER_NODE = 8  # deploy/slurm/recipe.sh's node shape


@dataclass(frozen=True)
class PanelQuery:
    row: str
    panel: str
    ref: str
    expr: str  # Grafana's variables filled in

    @property
    def from_slurmctld(self) -> bool:
        """Charts slurmctld's own metrics (slurm_*), not the bridge's (slurmbridge_*)."""
        return re.search(r"\bslurm_", self.expr) is not None

    def __str__(self) -> str:
        return f"panel {self.panel!r} (row {self.row!r}, query {self.ref}): {self.expr}"


def dashboard_queries() -> list[PanelQuery]:
    """Every query of every panel, with its row (Grafana's layout: a row holds the panels
    after it, or, collapsed, its own ``panels``)."""
    found: list[PanelQuery] = []
    row = ""
    dashboard = json.loads(DASHBOARD.read_text())
    # The dashboard's own variables ($namespace, $instance) as "All" fills them in.
    variables = {**GRAFANA_VARIABLES, **{
        f"${v['name']}": v["allValue"] for v in dashboard["templating"]["list"]
        if v.get("includeAll")}}

    def add(panel: dict[str, Any], row: str) -> None:
        for target in panel.get("targets", []):
            expr = target.get("expr", "")
            for name, value in variables.items():
                expr = expr.replace(name, value)
            assert "$__" not in expr and "${" not in expr, \
                f"panel {panel['title']!r}: a Grafana variable the test does not fill in: {expr}"
            found.append(PanelQuery(row, panel["title"], target["refId"], expr))

    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            row = panel["title"]
            for inner in panel.get("panels", []):
                add(inner, row)
        else:
            add(panel, row)
    assert found, f"no PromQL expressions in {DASHBOARD}"
    return found


@dataclass(frozen=True)
class Slurmctld:
    version: tuple[int, int]
    target: str  # host:port of its HTTP listener (SlurmctldPort)
    metrics_type: str

    @property
    def has_metrics(self) -> bool:
        return self.version >= SLURMCTLD_METRICS_SINCE


def slurmctld_of(slurm: SlurmTarget) -> Slurmctld:
    """What slurmctld says of itself (``scontrol show config``); it listens on the host of
    slurmrestd (the local clusters, the dockerized one)."""
    config = dict(re.findall(r"^(\w+)\s+=\s+(.*?)\s*$", slurm.admin("scontrol", "show", "config"),
                             re.MULTILINE))
    major, minor = (int(part) for part in config["SLURM_VERSION"].split(".")[:2])
    host = urlsplit(slurm.url).hostname or "127.0.0.1"
    return Slurmctld((major, minor), f"{host}:{config['SlurmctldPort']}",
                     config.get("MetricsType", "(none)"))


@pytest.fixture
def slurmctld(bridge_stack: BridgeStack) -> Slurmctld:
    ctld = slurmctld_of(bridge_stack.slurm)
    if ctld.has_metrics and ctld.metrics_type != "metrics/openmetrics":
        pytest.fail(f"slurmctld {ctld.version} serves no /metrics: slurm.conf has MetricsType="
                    f"{ctld.metrics_type}; deploy/slurm/recipe.sh sets metrics/openmetrics "
                    "(docs/operations.md, \"Monitoring\")", pytrace=False)
    return ctld


@pytest.fixture
def prometheus(bridge_stack: BridgeStack, slurmctld: Slurmctld,
               tmp_path: Path) -> Iterator[Prometheus]:
    jobs = [scrape_job("slurmbridge", [f"127.0.0.1:{bridge_stack.health_port}"], "/metrics/"),
            {**scrape_job("slurmbridge-webhook", [urlsplit(bridge_stack.webhook.health_url).netloc],
                          "/metrics"),
             "scheme": "https", "tls_config": {"ca_file": str(bridge_stack.work / "ca.crt")}}]
    if slurmctld.has_metrics:
        jobs.append(slurmctld_scrape_job(slurmctld.target))
    with run_prometheus(jobs, tmp_path) as server:
        yield server


async def test_every_dashboard_panel_returns_data(
    bridge_stack: BridgeStack, kube: AsyncClient, e2e_namespace: NamespaceFactory,
    prometheus: Prometheus, slurmctld: Slurmctld,
) -> None:
    queries = dashboard_queries()
    slurm_rows = {q.row for q in queries if q.from_slurmctld}
    bridge_rows = {q.row for q in queries if not q.from_slurmctld}
    assert slurm_rows and bridge_rows and not slurm_rows & bridge_rows, \
        f"the dashboard keeps the bridge's and slurmctld's panels in rows of their own: " \
        f"bridge {bridge_rows}, Slurm {slurm_rows}"
    required = [q for q in queries if slurmctld.has_metrics or not q.from_slurmctld]

    def scraped(job: str, targets: int) -> bool:
        return prometheus.values(f'up{{job="{job}"}}') == [1.0] * targets

    await wait_for(lambda: scraped("slurmbridge", 1) and scraped("slurmbridge-webhook", 1), 30,
                   what=f"Prometheus scraping the bridge and its webhook "
                        f"(log: {prometheus.log_file})")
    if slurmctld.has_metrics:
        await wait_for(lambda: scraped("slurmctld", 4), 30,
                       what=f"Prometheus scraping slurmctld's /metrics/{{jobs,nodes,partitions,"
                            f"scheduler}} at {slurmctld.target} (log: {prometheus.log_file})")
    _, ns = await quiet_namespace(bridge_stack, e2e_namespace, "monitored")
    # An operator's normal day: pods bound (bind latency, filter answers, slurmrestd calls),
    # a pod Slurm refuses (a slurmrestd error), a pod deleted while its job runs (the
    # controllers cancel the job), and whole-node pods beyond the cluster's GPUs waiting in
    # Slurm's queue (4 nodes of 8 GPUs, 5 such pods besides the two bound: some pend).
    for i in range(2):
        await create_pod(kube, ns, PodBuilder(f"bound-{i}").gpus(1).build())
    await create_pod(kube, ns, PodBuilder("nowhere").annotate(keys.PARTITION, "no-such").build())
    for i in range(5):
        await create_pod(kube, ns, PodBuilder(f"whole-{i}").gpus(GPUS_PER_NODE).build())
    for i in range(2):
        await wait_bound(kube, ns, f"bound-{i}")
    await kube.delete(Pod, "bound-0", namespace=ns, grace_period=0)

    def shows(expr: str) -> bool:
        return any(v >= 1 for v in prometheus.values(expr))

    await wait_for(lambda: shows('slurmbridge_placeholder_jobs{state="PENDING"}'), 60,
                   what="the bridge's pending pods on the bridge's row")
    if slurmctld.has_metrics:  # Slurm's own row shows the same queue, by partition
        await wait_for(lambda: shows('slurm_partition_jobs_pending{partition="main"}')
                       and shows('slurm_partition_jobs_running{partition="main"}'), 60,
                       what="pending and running jobs in partition main on slurmctld's /metrics")

    def empty() -> list[PanelQuery]:
        return [q for q in required if not prometheus.has_numbers(q.expr)]

    deadline = time.monotonic() + 90
    while empty() and time.monotonic() < deadline:
        await asyncio.sleep(2)
    missing = "\n".join(map(str, empty()))
    assert not missing, \
        f"dashboard panels without data (Prometheus log: {prometheus.log_file}):\n{missing}"
