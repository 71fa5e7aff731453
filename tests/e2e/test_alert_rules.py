"""The chart's alerts, as Prometheus would evaluate them: the PrometheusRule the chart renders
is handed to ``promtool test rules`` (Debian's ``prometheus`` package) with the series of
tests/e2e/alert_rules_test.yaml, which says when each alert fires and when it stays quiet.
The webhook's ServiceMonitor, which the webhook alerts read, is checked beside them."""

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from slurmbridge_devkit.helm import Manifest, render

pytestmark = pytest.mark.e2e

RULES_TEST = Path(__file__).with_name("alert_rules_test.yaml")
RELEASE, NAMESPACE = "slurmbridge", "slurmbridge-system"  # the labels the test's series carry
OPERATOR = ("--api-versions", "monitoring.coreos.com/v1/ServiceMonitor",
            "--api-versions", "monitoring.coreos.com/v1/PrometheusRule")
ALERTS = {"SlurmbridgeDown", "SlurmbridgeWebhookDown", "SlurmbridgeNoLeader",
          "SlurmbridgeSlurmUnreachable", "SlurmbridgeSlurmTokenExpiring",
          "SlurmbridgePodsGatedTooLong", "SlurmbridgeWebhookRefusalsSpiking"}


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail("promtool is missing: it comes with Debian's `prometheus` package "
                    "(apt-get install prometheus; deploy/dev/install.sh installs it)",
                    pytrace=False)
    return found


def of_kind(docs: list[Manifest], kind: str) -> list[Manifest]:
    return [d for d in docs if d["kind"] == kind]


def alerts(rule: Manifest) -> set[str]:
    return {r["alert"] for group in rule["spec"]["groups"] for r in group["rules"]}


def test_every_alert_fires_and_stays_quiet_as_promtool_evaluates_it(tmp_path: Path) -> None:
    rules = of_kind(render(RELEASE, NAMESPACE, *OPERATOR), "PrometheusRule")
    assert len(rules) == 1, f"the chart renders {len(rules)} PrometheusRules with the operator"
    rule = rules[0]
    assert alerts(rule) == ALERTS
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule["spec"]))
    shutil.copyfile(RULES_TEST, tmp_path / RULES_TEST.name)
    tested: set[str] = {
        case["alertname"]
        for test in yaml.safe_load(RULES_TEST.read_text())["tests"]
        for case in test.get("alert_rule_test", []) if case.get("exp_alerts")
    }
    assert tested == ALERTS, f"alerts without a firing case in {RULES_TEST.name}"
    for args in (["check", "rules", "rules.yaml"], ["test", "rules", RULES_TEST.name]):
        proc = subprocess.run([promtool(), *args], cwd=tmp_path, capture_output=True,
                              text=True, check=False, timeout=120)
        assert proc.returncode == 0, f"promtool {' '.join(args)}:\n{proc.stdout}{proc.stderr}"


@pytest.mark.parametrize(("flags", "rendered"), [
    ((), False),  # no Prometheus Operator in the cluster
    (OPERATOR, True),
    ((*OPERATOR, "--set", "monitoring.prometheusRule.enabled=false"), False),
    ((*OPERATOR, "--set", "monitoring.serviceMonitor.enabled=false"), False),
])
def test_the_rules_come_with_the_operator_and_its_service_monitors(
    flags: tuple[str, ...], rendered: bool
) -> None:
    docs = render(RELEASE, NAMESPACE, *flags)
    assert bool(of_kind(docs, "PrometheusRule")) is rendered


def test_the_webhooks_service_monitor_scrapes_https_trusting_its_ca() -> None:
    monitors = of_kind(render(RELEASE, NAMESPACE, *OPERATOR), "ServiceMonitor")
    (hook,) = [m for m in monitors if m["metadata"]["name"] == f"{RELEASE}-webhook"]
    (endpoint,) = hook["spec"]["endpoints"]
    tls: dict[str, Any] = endpoint["tlsConfig"]
    assert (endpoint["port"], endpoint["scheme"], endpoint["path"]) == ("https", "https",
                                                                         "/metrics")
    assert tls["ca"]["secret"] == {"name": f"{RELEASE}-webhook-tls", "key": "ca.crt"}
    assert tls["serverName"] == f"{RELEASE}-webhook.{NAMESPACE}.svc"
