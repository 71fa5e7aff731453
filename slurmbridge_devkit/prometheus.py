"""A real Prometheus server (Debian's package) scraping the bridge and slurmctld, for the
monitoring tests.

The package is unpacked into the cache, not installed: installing it would start a system
service listening on every address.  The server here listens on 127.0.0.1 only, scrapes
every second and keeps its data in a temporary folder.
"""

import contextlib
import fcntl
import math
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from slurmbridge_devkit.kube import cache_dir
from slurmbridge_devkit.processes import free_port, stop_process

PACKAGE = "prometheus"  # Debian 12: 2.42


def prometheus_binary() -> Path:
    """``prometheus`` from Debian's package, unpacked once under the cache."""
    root = cache_dir() / "prometheus"
    binary = root / "usr" / "bin" / "prometheus"
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".lock").open("w") as lock:  # test tiers run side by side: unpack it once
        fcntl.flock(lock, fcntl.LOCK_EX)
        if binary.exists():
            return binary
        return _unpack(root, binary)


def _unpack(root: Path, binary: Path) -> Path:
    done = _download(root)
    if done.returncode != 0:  # stale package lists on a fresh machine
        subprocess.run(["apt-get", "update", "-qq"], capture_output=True, check=False)
        done = _download(root)
    debs = sorted(root.glob(f"{PACKAGE}_*.deb"))
    if done.returncode != 0 or not debs:
        raise AssertionError(
            f"Debian's {PACKAGE} package could not be downloaded (apt-get download {PACKAGE}): "
            f"{done.stderr.strip()}"
        )
    subprocess.run(["dpkg-deb", "-x", str(debs[-1]), str(root)], check=True)
    return binary


def _download(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["apt-get", "download", PACKAGE], cwd=root, capture_output=True,
                          text=True, check=False)


@dataclass
class Prometheus:
    url: str
    log_file: Path

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The result vector of an instant query (Prometheus's HTTP API)."""
        resp = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=10)
        body = resp.json()
        if body.get("status") != "success":
            raise AssertionError(f"query {expr!r}: {body.get('error', resp.text)}")
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def values(self, expr: str) -> list[float]:
        """The sample values of ``expr``, NaN included (an empty list: no data)."""
        return [float(sample["value"][1]) for sample in self.query(expr)]

    def has_numbers(self, expr: str) -> bool:
        """Whether ``expr`` returns a sample that is a number.  A series can be NaN (a
        quantile of an operation with no calls in the window): Grafana draws no point there."""
        return any(not math.isnan(v) for v in self.values(expr))


SLURMCTLD_METRICS = ("jobs", "nodes", "partitions", "scheduler")  # slurmctld's /metrics/<name>


def scrape_job(name: str, targets: list[str], metrics_path: str) -> dict[str, Any]:
    """A scrape job of ``targets`` (host:port) at one path."""
    return {"job_name": name, "metrics_path": metrics_path,
            "static_configs": [{"targets": targets}]}


def slurmctld_scrape_job(target: str, name: str = "slurmctld") -> dict[str, Any]:
    """slurmctld's own metrics (Slurm >= 25.11, ``MetricsType=metrics/openmetrics``), served
    on its SlurmctldPort at one path per set: one target group per path, labelled
    ``endpoint`` (as docs/operations.md, "Monitoring", shows it)."""
    return {"job_name": name, "static_configs": [
        {"targets": [target], "labels": {"__metrics_path__": f"/metrics/{path}",
                                         "endpoint": path}}
        for path in SLURMCTLD_METRICS
    ]}


@contextlib.contextmanager
def run_prometheus(scrape_configs: list[dict[str, Any]], work: Path) -> Iterator[Prometheus]:
    """Prometheus on 127.0.0.1 scraping every second; stopped after."""
    binary = prometheus_binary()
    port = free_port()
    config = work / "prometheus.yml"
    config.write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": scrape_configs,
    }))
    log_file = work / "prometheus.log"
    with log_file.open("ab") as log:
        proc = subprocess.Popen(
            [str(binary), f"--config.file={config}", f"--storage.tsdb.path={work / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
    server = Prometheus(f"http://127.0.0.1:{port}", log_file)
    try:
        deadline = time.monotonic() + 60
        while not _ready(server.url):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"prometheus did not start: {log_file.read_text()[-2000:]}")
            time.sleep(0.2)
        yield server
    finally:
        stop_process(proc, timeout=30)


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/-/ready", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
