"""``slurmbridge status``: pods joined with their Slurm jobs (single pods, groups, ended jobs),
as a table and as JSON, read through the real clients from a fake apiserver and slurmrestd."""

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import httpx2
from lightkube import AsyncClient, KubeConfig

from bridge import keys
from bridge.config import SlurmSettings
from bridge.placement.reasons import clock
from bridge.policy.tenancy import TenancyMap, TenancySource, Tenant, owner_trust, placeholder_trust
from bridge.slurm.client import PlaceholderTrust, SlurmClient
from slurmbridge_cli.status_view import as_dicts, collect, render_table
from slurmbridge_devkit.builders import PodBuilder
from slurmbridge_devkit.slurm_http import MOCK_SLURM_URL, HttpxExchange

NS = "lab"


def _job(job_id: int, owner: str, state: str, nodes: str = "", *, gres: list[str] | None = None,
         reason: str = "None") -> dict[str, Any]:
    return {
        "job_id": job_id, "name": f"k8s:{NS}/x", "user_name": "slurm", "job_state": [state],
        "comment": f"{keys.COMMENT_OWNER}{owner}", "nodes": nodes, "state_reason": reason,
        "gres_detail": gres or [],
    }


# Slurm's backfill estimate for job 5: in an hour (a year ahead would be Slurm's "no plan").
EXPECTED_AT = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
EXPECTED = int(EXPECTED_AT.timestamp())
JOBS = [
    _job(1, "uid-solo", "RUNNING", "node1", gres=["gpu:2(IDX:4-5)"]),
    _job(2, f"group:{NS}/allreduce", "RUNNING", "node[1-2]", gres=["gpu:1(IDX:6)", "gpu:1(IDX:0)"]),
    _job(3, "uid-done", "COMPLETED", "node2"),
    # A requeued pod's first job ended; its second one waits: the live one is shown.
    _job(4, "uid-again", "CANCELLED", "node1"),
    {**_job(5, "uid-again", "PENDING", reason="Priority"),
     "start_time": {"set": True, "infinite": False, "number": EXPECTED}},
    _job(6, "uid-native", "RUNNING", "node1"),  # no pod of ours: not listed
]


def _pod(name: str, uid: str, node: str = "", gpus: str = "", **labels: str) -> dict[str, Any]:
    pod = PodBuilder(name, NS).uid(uid).created("2026-01-01T00:00:00Z").labels(labels)
    if gpus:
        pod.annotate(keys.GPU_IDS, gpus)
    if node:
        pod.node(node)
    return pod.manifest()


PODS = [
    _pod("solo", "uid-solo", "kube-node1", "4,5"),
    _pod("worker-0", "uid-w0", "kube-node1", "6", **{keys.GROUP: "allreduce"}),
    _pod("worker-1", "uid-w1", "kube-node2", "0", **{keys.GROUP: "allreduce"}),
    _pod("done", "uid-done", "kube-node2"),
    _pod("again", "uid-again"),
    _pod("new", "uid-new"),
]


def _slurm(jobs: list[dict[str, Any]] = JOBS, trust: PlaceholderTrust | None = None
           ) -> SlurmClient:
    def rest(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/openapi/v3":
            return httpx.Response(200, json={"paths": {"/slurm/v0.0.44/jobs/": {}}})
        assert request.url.path == "/slurm/v0.0.44/jobs/", request.url
        return httpx.Response(200, json={"jobs": jobs, "last_update": {"number": 1},
                                         "last_backfill": {"set": True, "number": EXPECTED - 60}})

    settings = SlurmSettings(url=MOCK_SLURM_URL, user="slurm", token="t", retries=0)
    return SlurmClient(settings, exchange=HttpxExchange.mock(rest), trust=trust)


def _kube() -> AsyncClient:
    def api(request: httpx2.Request) -> httpx2.Response:
        assert request.url.path == "/api/v1/pods", request.url
        assert request.url.params["fieldSelector"] == f"spec.schedulerName={keys.SCHEDULER_NAME}"
        return httpx2.Response(200, json={
            "apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": PODS,
        })

    config = KubeConfig.from_dict({
        "clusters": [{"name": "c", "cluster": {"server": "http://k8s"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    })
    return AsyncClient(config=config, transport=httpx2.MockTransport(api))


async def _rows() -> list[dict[str, Any]]:
    async with _slurm() as slurm:
        return as_dicts(await collect(_kube(), slurm))


async def test_json_joins_each_pod_with_its_job() -> None:
    rows = {r["pod"]: r for r in json.loads(json.dumps(await _rows()))}
    assert list(rows) == sorted(f"{NS}/{n}" for n in
                                ("solo", "worker-0", "worker-1", "done", "again", "new"))
    solo = rows[f"{NS}/solo"]
    assert (solo["job_id"], solo["state"], solo["node"], solo["gpus"]) == (
        1, "RUNNING", "kube-node1", "4,5"
    )
    # Both members of a group show the group's one job, each with its own node and GPUs.
    members = [rows[f"{NS}/worker-{i}"] for i in range(2)]
    assert [(m["job_id"], m["node"], m["gpus"]) for m in members] == [
        (2, "kube-node1", "6"), (2, "kube-node2", "0")
    ]
    assert (rows[f"{NS}/done"]["job_id"], rows[f"{NS}/done"]["state"]) == (3, "COMPLETED")
    again = rows[f"{NS}/again"]
    assert (again["job_id"], again["state"], again["reason"]) == (5, "PENDING", "Priority")
    assert again["expected_start"] == EXPECTED_AT.isoformat()
    assert solo["expected_start"] is None
    assert (rows[f"{NS}/new"]["job_id"], rows[f"{NS}/new"]["state"]) == (None, "NO JOB")


async def test_table_has_a_header_and_one_line_per_pod() -> None:
    async with _slurm() as slurm:
        table = render_table(await collect(_kube(), slurm)).splitlines()
    assert table[0].split()[:5] == ["POD", "JOB", "STATE", "REASON", "EXPECTED"]
    assert f"{NS}/again" in table[1]
    assert f"Priority  {clock(EXPECTED_AT, datetime.now(UTC))}  " in table[1]
    lines = {line.split()[0]: line.split() for line in table[1:]}
    assert len(lines) == 6
    assert lines[f"{NS}/worker-1"][1:3] == ["2", "RUNNING"]
    assert lines[f"{NS}/done"][1:3] == ["3", "COMPLETED"]
    assert lines[f"{NS}/new"][1:4] == ["-", "NO", "JOB"]
    assert "kube-node2" in lines[f"{NS}/worker-1"] and "0" in lines[f"{NS}/worker-1"]


async def test_a_job_another_tenant_forged_for_a_pod_is_not_shown_as_its_job() -> None:
    """Issue 41, case 3: alice, whom namespace ``other`` runs as, copies solo's UID into her
    running job's comment: ``status`` shows solo's own job, as the bridge decides it."""
    tenancy = TenancySource(None, fixed=TenancyMap(namespaces={"other": Tenant(user="alice")}))
    forged = {**_job(7, "uid-solo", "RUNNING", "node2", gres=["gpu:1(IDX:0)"]),
              "name": "k8s:other/x", "user_name": "alice"}
    async with _slurm([*JOBS, forged], placeholder_trust(tenancy)) as slurm:
        rows = as_dicts(await collect(_kube(), slurm, owner_trust(tenancy, "slurm")))
    solo = next(r for r in rows if r["pod"] == f"{NS}/solo")
    assert (solo["job_id"], solo["user"], solo["gpus"]) == (1, "slurm", "4,5")
