"""B7: client CPU per exchange with slurmrestd, per HTTP stack and per decoder.

Issue 22, item 4: the exchanges the bridge makes with slurmrestd, each measured as the
client's CPU time per exchange (``time.process_time`` of the client process over a batch,
divided by the batch's exchanges), keep-alive, over loopback to a stand-in slurmrestd with
fixed bodies that the benchmark starts itself on a free port (its own process, so its CPU
is not the client's).  The exchanges:

- ``submit``: ``POST /slurm/v0.0.44/job/submit`` of a placeholder description, a small
  JSON answer;
- ``read 28.5 kB`` / ``read 375 kB``: ``GET /slurm/v0.0.44/job/<id>`` of a running
  placeholder, answered with a v0.0.44-shaped job record whose per-core allocation list
  makes the answer 28.5 kB (an 8-CPU job on a 64-CPU node) or 375 kB (a 1-CPU job on a
  1,250-CPU node), pretty-printed as slurmrestd writes without ``SLURMRESTD_JSON=compact``
  (the sizes docs/architecture.md reports from Slurm 26.05);
- ``state poll``: ``GET /slurm/v0.0.44/jobs/state/?job_id=..`` naming 10 jobs, a small
  answer.

Side by side in one client process per repeat, on uvloop (the extender's loop: uvicorn
picks it), the stacks interleaved in rounds (their order rotating) so that the machine's
load falls on all of them alike; each figure is the median of the repeats:

- ``httpx``: a bare ``httpx.AsyncClient`` (bytes only, no decoding);
- ``aiohttp``: a bare ``aiohttp.ClientSession`` (bytes only);
- ``httpx over reqwest``: a bare ``httpx.AsyncClient`` on pyreqwest's httpx transport
  (reqwest, in Rust, instead of httpcore);
- ``pyreqwest``: a bare pyreqwest ``Client`` (bytes only);
- ``SlurmClient``: the bridge's own ``SlurmClient`` (pyreqwest), the whole path a
  caller pays for: credentials, retries, metrics, the pydantic wire models, conversion to
  the core's types, the submit's log line (rendered to /dev/null as in production);
- decoding alone: the pydantic wire models the bridge uses against a msgspec ``Struct``
  declaring only the fields the bridge reads (``JobInfo``'s 12).

Also checked: whether ``sniffio`` is importable, and how often an httpx request makes
Python look for it (httpcore retries a failed ``import sniffio`` on each request when it is
missing: a ``sys.path`` scan each time).  The rule (issue 22): adopt what wins by >= 1.5x.

``python -m benchmarks.b7_exchanges serve --port N`` is the stand-in server and
``python -m benchmarks.b7_exchanges child --url U`` one repeat's client; the runner
(``python -m benchmarks.run --only B7``) starts both.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import gc
import importlib.abc
import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from types import ModuleType
from typing import Any, cast

import msgspec

from benchmarks.common import Figure, Outcome, at_least, at_most, fmt, free_port, run_child
from bridge.jobs.owner import PodOwner
from bridge.jobs.request import JobRequest
from bridge.slurm.convert import comment_for
from bridge.slurm.wire import FAMILIES
from slurmbridge_devkit.processes import stop_process

PARSER = "v0.0.44"
BRIDGE_USER = "slurm"
SMALL_JOB, LARGE_JOB = 1001, 1002
POLL_IDS = tuple(range(2001, 2011))
SUBMITTED = 3001
ADOPT = 1.5  # issue 22: adopt what wins by >= 1.5x
NOT_ADOPTED = (
    "Adopted: bare pyreqwest, behind the bridge's own seam (bridge/slurm/http.py; the "
    "tests' httpx.MockTransport handlers sit behind it through the dev kit). Not adopted: "
    "httpx over reqwest (httpx's URL and model layers stay, 2-2.5x where bare pyreqwest "
    "wins 10x), and aiohttp. slurmrestd (26.05.5) answers an error with two HTTP "
    "responses on one connection, the JSON one marked `Connection: Close` and a plain-text "
    "one straight after; aiohttp's parsers (C and Python) refuse the data after the close "
    "and lose the status and Slurm's words. With the Slurm client on aiohttp, 4 of the 18 "
    "integration tests against the dockerized 26.05 failed (an unknown job no longer "
    "SlurmJobNotFound, a rejected submit no longer SlurmRejected, two credential tests); "
    "tests/unit/test_slurm_wire_quirks.py replays that answer and fails on aiohttp. httpx "
    "and reqwest read the first answer and ignore the rest. Decoding stays pydantic: "
    "through the whole exchange a struct of the fields read saved at most 1.4x (the 375 kB "
    "read), below the rule."
)
# A JWT as `scontrol token` prints it (HS256, claims iat/exp/sun): the header's length matters.
TOKEN = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJleHAiOjE3OTk5OTk5OTksImlhdCI6MTc2NDU5NjgwMCwic3Vu"
    "Ijoic2x1cm0ifQ.Vb0tV6yYp0G6aJx4sC0mJ0l4h7Y0uQ2f0cVdKc9g3xE"
)

KINDS = ("submit", "read28", "read375", "poll")
LABELS = {
    "submit": "submit (POST, small answer)",
    "read28": "job read, 28.5 kB answer",
    "read375": "job read, 375 kB answer",
    "poll": "state poll of 10 jobs (GET /jobs/state/)",
}
TARGET_BYTES = {"read28": 28_500, "read375": 375_000}


@dataclass
class Config:
    repeats: int = 3
    requests: int = 200  # per stack and kind and repeat; the 375 kB read a quarter of it
    rounds: int = 4  # batches per cell, interleaved with the other stacks


def _count(kind: str, cfg: Config) -> int:
    return max(cfg.rounds, cfg.requests // 4 if kind == "read375" else cfg.requests)


# -- the stand-in slurmrestd's bodies -------------------------------------------------------


def _noval(number: int = 0, *, is_set: bool = True) -> dict[str, Any]:
    return {"set": is_set, "infinite": False, "number": number}


def _meta() -> dict[str, Any]:
    return {
        "plugin": {"type": "openapi/slurmctld", "name": "Slurm OpenAPI slurmctld",
                   "data_parser": f"data_parser/{PARSER}", "accounting_storage": ""},
        "client": {"source": "[127.0.0.1]:40022(fd:10)", "user": "slurm", "group": "slurm"},
        "command": [],
        "slurm": {"version": {"major": "26", "micro": "0", "minor": "05"},
                  "release": "26.05.0", "cluster": "linux"},
    }


def job_record(job_id: int, cpus: int, cores: int) -> dict[str, Any]:
    """A running placeholder of the bridge as ``GET /job/<id>`` answers it (data parser
    v0.0.44): the 12 fields the bridge reads, and the rest of the record with the per-core
    allocation list of its node (``cores`` entries over 2 sockets, ``cpus`` allocated)."""
    per_socket = (cores + 1) // 2
    sockets = [
        {"index": s, "cores": [
            {"index": c, "status": ["ALLOCATED" if s * per_socket + c < cpus else "UNALLOCATED"]}
            for c in range(min(per_socket, cores - s * per_socket))
        ]} for s in range(2)
    ]
    t0 = 1_764_600_000
    return {
        "account": "team-a", "accrue_time": _noval(t0), "admin_comment": "",
        "allocating_node": "slurmctld", "array_job_id": _noval(0), "array_task_id":
        _noval(0, is_set=False), "array_max_tasks": _noval(0), "array_task_string": "",
        "association_id": 7, "batch_features": "", "batch_flag": False, "batch_host": "node1",
        "flags": ["EXTERNAL_JOB", "EXACT_CPU_COUNT_REQUESTED", "USING_DEFAULT_QOS",
                  "USING_DEFAULT_WCKEY", "PARTITION_ASSIGNED", "BACKFILL_ATTEMPTED"],
        "burst_buffer": "", "burst_buffer_state": "", "cluster": "linux",
        "cluster_features": "", "command": "", "comment": f"slurmbridge.io/pod-uid=uid-{job_id}",
        "container": "", "container_id": "", "contiguous": False, "core_spec": 0,
        "thread_spec": 32766, "cores_per_socket": _noval(0, is_set=False),
        "billable_tres": {"set": True, "infinite": False, "number": float(cpus)},
        "cpus_per_task": _noval(1), "cpu_frequency_minimum": _noval(0, is_set=False),
        "cpu_frequency_maximum": _noval(0, is_set=False),
        "cpu_frequency_governor": _noval(0, is_set=False), "cpus_per_tres": "", "cron": "",
        "deadline": _noval(0), "delay_boot": _noval(0), "dependency": "",
        "derived_exit_code": {"status": ["SUCCESS"], "return_code": _noval(0),
                              "signal": {"id": _noval(0, is_set=False), "name": ""}},
        "eligible_time": _noval(t0), "end_time": _noval(t0 + 31_536_000),
        "excluded_nodes": "", "exit_code": {"status": ["SUCCESS"], "return_code": _noval(0),
                                            "signal": {"id": _noval(0, is_set=False),
                                                       "name": ""}},
        "extra": "", "failed_node": "", "features": "", "federation_origin": "",
        "federation_siblings_active": "", "federation_siblings_viable": "",
        "gres_detail": [], "group_id": 0, "group_name": "slurm",
        "het_job_id": _noval(0), "het_job_id_set": "", "het_job_offset": _noval(0),
        "job_id": job_id,
        "job_resources": {
            "select_type": ["CR_CORE_MEMORY"],
            "nodes": {"count": 1, "select_type": ["ONE_ROW"], "list": "node1", "whole": False,
                      "allocation": [{"index": 0, "name": "node1",
                                      "cpus": {"count": cpus, "used": 0},
                                      "memory": {"used": 0, "allocated": 1024 * cpus},
                                      "sockets": sockets}]},
            "cpus": cpus, "threads_per_core": _noval(1),
        },
        "job_size_str": [], "job_state": ["RUNNING"], "last_sched_evaluation": _noval(t0),
        "licenses": "", "licenses_allocated": "", "mail_type": [], "mail_user": "slurm",
        "max_cpus": _noval(0), "max_nodes": _noval(1), "mcs_label": "", "memory_per_tres": "",
        "name": f"k8s:bench/p{job_id}", "network": "", "nodes": "node1", "nice": 0,
        "tasks_per_core": _noval(0, is_set=False), "tasks_per_tres": _noval(0),
        "tasks_per_node": _noval(1), "tasks_per_socket": _noval(0, is_set=False),
        "tasks_per_board": _noval(0), "cpus": _noval(cpus), "node_count": _noval(1),
        "tasks": _noval(1), "partition": "main", "prefer": "",
        "memory_per_cpu": _noval(0, is_set=False), "memory_per_node": _noval(1024 * cpus),
        "minimum_cpus_per_node": _noval(cpus), "minimum_tmp_disk_per_node": _noval(0),
        "power": {"flags": []}, "preempt_time": _noval(0), "preemptable_time": _noval(0),
        "pre_sus_time": _noval(0), "hold": False, "priority": _noval(4294901757),
        "priority_by_partition": [], "profile": ["NOT_SET"], "qos": "normal", "reboot": False,
        "required_nodes": "", "required_switches": 0, "requeue": False,
        "resize_time": _noval(0), "restart_cnt": 0, "resv_name": "", "scheduled_nodes": "",
        "segment_size": 0, "selinux_context": "", "shared": [], "sockets_per_board": 0,
        "sockets_per_node": _noval(0, is_set=False), "start_time": _noval(t0 + 2),
        "state_description": "", "state_reason": "None", "standard_error": "",
        "standard_input": "/dev/null", "standard_output": "", "submit_time": _noval(t0),
        "suspend_time": _noval(0), "system_comment": "", "time_limit": _noval(0, is_set=False),
        "time_minimum": _noval(0), "threads_per_core": _noval(0, is_set=False),
        "tres_bind": "", "tres_freq": "", "tres_per_job": "", "tres_per_node": "",
        "tres_per_socket": "", "tres_per_task": "",
        "tres_req_str": f"cpu={cpus},mem={cpus}G,node=1,billing={cpus}",
        "tres_alloc_str": f"cpu={cpus},mem={cpus}G,node=1,billing={cpus}",
        "user_id": 0, "user_name": BRIDGE_USER, "maximum_switch_wait_time": 0, "wckey": "",
        "current_working_directory": "/tmp",
    }


def _pretty(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, indent=2).encode()


def _job_answer(job_id: int, cpus: int, cores: int) -> bytes:
    return _pretty({"jobs": [job_record(job_id, cpus, cores)], "last_backfill": _noval(0),
                    "last_update": _noval(1_764_600_100), "meta": _meta(), "errors": [],
                    "warnings": []})


def _sized_job_answer(job_id: int, cpus: int, target: int) -> bytes:
    """The answer whose per-core list brings it closest to ``target`` bytes (the measured
    size of the real answer; the list is what grows with the node)."""
    lo, hi = cpus, 64
    while len(_job_answer(job_id, cpus, hi)) < target:
        hi *= 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if len(_job_answer(job_id, cpus, mid)) < target else (lo, mid)
    return min((_job_answer(job_id, cpus, n) for n in (lo, hi)), key=lambda b: abs(len(b) - target))


def bodies() -> dict[str, bytes]:
    """What the stand-in answers, by exchange (and ``openapi`` for the negotiation)."""
    return {
        "openapi": json.dumps({"openapi": "3.0.3", "paths": {
            f"/slurm/{PARSER}/{p}": {} for p in ("jobs/", "job/submit", "jobs/state/")
        }}).encode(),
        "submit": _pretty({"job_id": SUBMITTED, "step_id": "batch", "job_submit_user_msg": "",
                           "result": {"job_id": SUBMITTED, "step_id": "batch", "error_code": 0,
                                      "error": "No error", "job_submit_user_msg": ""},
                           "meta": _meta(), "errors": [], "warnings": []}),
        "read28": _sized_job_answer(SMALL_JOB, 8, TARGET_BYTES["read28"]),
        "read375": _sized_job_answer(LARGE_JOB, 1, TARGET_BYTES["read375"]),
        "poll": _pretty({"jobs": [{"job_id": i, "state": ["RUNNING"]} for i in POLL_IDS],
                         "last_update": _noval(1_764_600_100), "meta": _meta(), "errors": [],
                         "warnings": []}),
    }


def route(method: str, path: str) -> str | None:
    """Which body answers ``method path`` (the query ignored)."""
    base = f"/slurm/{PARSER}"
    return {
        ("GET", "/openapi/v3"): "openapi",
        ("POST", f"{base}/job/submit"): "submit",
        ("GET", f"{base}/job/{SMALL_JOB}"): "read28",
        ("GET", f"{base}/job/{LARGE_JOB}"): "read375",
        ("GET", f"{base}/jobs/state/"): "poll",
    }.get((method, path.split("?", 1)[0]))


# -- the stand-in server (its own process) ---------------------------------------------------


class _StandIn(asyncio.Protocol):
    """HTTP/1.1 with keep-alive, fixed answers by route; no chunked requests (none are sent)."""

    def __init__(self, answers: dict[str, bytes],
                 router: Callable[[str, str], str | None] | None = None) -> None:
        self.answers = answers
        self.router = router or route
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            head = self.buffer[:end].decode("latin-1").split("\r\n")
            length = next((int(line.split(":", 1)[1]) for line in head[1:]
                           if line.lower().startswith("content-length:")), 0)
            if len(self.buffer) < end + 4 + length:
                return
            self.buffer = self.buffer[end + 4 + length:]
            method, target, _ = head[0].split(" ", 2)
            self.respond(self.router(method, target) or "")

    def respond(self, key: str) -> None:
        assert self.transport is not None
        self.transport.write(self.answers.get(key, self.answers["404"]))


def response(status: str, body: bytes) -> bytes:
    """A whole HTTP/1.1 answer with a JSON body."""
    return (f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def serve_forever(port: int, protocol: Callable[[], asyncio.Protocol],
                  ssl: Any = None) -> None:
    """Serve ``protocol`` on 127.0.0.1:``port`` (uvloop) until killed."""
    import uvloop  # noqa: PLC0415

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(protocol, "127.0.0.1", port, ssl=ssl)
        async with server:
            await server.serve_forever()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main())


def serve(port: int) -> None:
    answers = {k: response("200 OK", b) for k, b in bodies().items()}
    answers["404"] = response("404 Not Found", b'{"errors": [{"error": "no such path"}]}')
    serve_forever(port, lambda: _StandIn(answers))


@contextlib.contextmanager
def stand_in(workdir: Path, module: str = "benchmarks.b7_exchanges",
             args: Sequence[str] = (), *, scheme: str = "http", command: str = "serve",
             wait: float = 60) -> Iterator[str]:
    """A stand-in server (``python -m module COMMAND --port N args``) in its own process on a
    free port; its URL while running."""
    port = free_port()
    log_path = workdir / f"b7-{command}-{port}.log"
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", module, command, "--port", str(port), *args],
            stdout=log, stderr=subprocess.STDOUT, cwd=str(Path(__file__).parents[1]),
        )
    try:
        deadline = time.monotonic() + wait
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"B7 {command} exited: {log_path.read_text()[-2000:]}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"B7 {command} not listening after {wait:g} s ({log_path})")
            time.sleep(0.1)
        yield f"{scheme}://127.0.0.1:{port}"
    finally:
        stop_process(proc, timeout=10)


# -- the client side (one process per repeat) ------------------------------------------------


class _NoVal(msgspec.Struct, frozen=True):
    set: bool = False
    infinite: bool = False
    number: int = 0


class _Error(msgspec.Struct):
    description: str = ""
    error: str = ""
    error_number: int = 0
    source: str = ""


class _Job(msgspec.Struct):
    """The 12 fields of a job the bridge reads (``JobInfo``), nothing else."""

    job_id: int
    name: str = ""
    comment: str = ""
    job_state: list[str] = []
    state_reason: str = ""
    nodes: str = ""
    gres_detail: list[str] = []
    partition: str = ""
    user_name: str = ""
    account: str = ""
    qos: str = ""
    preempt_time: _NoVal = _NoVal()


class _Jobs(msgspec.Struct):
    jobs: list[_Job] = []
    errors: list[_Error] = []
    warnings: list[_Error] = []


class _State(msgspec.Struct):
    job_id: int | str
    state: list[str] = []


class _States(msgspec.Struct):
    jobs: list[_State] = []
    errors: list[_Error] = []
    warnings: list[_Error] = []


class _Submitted(msgspec.Struct):
    job_id: int | None = None
    errors: list[_Error] = []
    warnings: list[_Error] = []


class _SniffioLookups(importlib.abc.MetaPathFinder):
    """Counts the times Python searches for ``sniffio`` (each one a failed import's scan)."""

    def __init__(self) -> None:
        self.count = 0

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> None:
        if fullname == "sniffio":
            self.count += 1


Query = tuple[tuple[str, str], ...]


def _headers() -> dict[str, str]:
    return {"X-SLURM-USER-NAME": BRIDGE_USER, "X-SLURM-USER-TOKEN": TOKEN}


def _answered(candidate: str, kind: str, status: int, content: object) -> None:
    """A candidate's exchange counts only if slurmrestd answered it in full."""
    if status != 200 or not content:
        raise RuntimeError(f"{candidate} {kind}: HTTP {status}")


def _request(kind: str) -> tuple[str, str, Query | None, bytes | None]:
    """(method, path, query, body) of one exchange, as SlurmClient sends it."""
    base = f"/slurm/{PARSER}"
    if kind == "submit":
        return "POST", f"{base}/job/submit", None, _SUBMIT_BODY
    if kind == "poll":
        return "GET", f"{base}/jobs/state/", tuple(("job_id", str(i)) for i in POLL_IDS), None
    return "GET", f"{base}/job/{SMALL_JOB if kind == 'read28' else LARGE_JOB}", None, None


def _placeholder() -> JobRequest:
    return JobRequest(name="k8s:bench/p", owner=PodOwner("uid-1"))


# The description SlurmClient.submit sends for _placeholder() (compact JSON, as httpx writes).
_SUBMIT_BODY = json.dumps(
    {"job": FAMILIES[PARSER].describe(_placeholder(), comment_for(_placeholder().owner))
     .model_dump(exclude_none=True)}, separators=(",", ":"), ensure_ascii=False,
).encode()


@contextlib.asynccontextmanager
async def _httpx(url: str, *, over_reqwest: bool = False) -> Any:
    """Bare httpx, on httpcore or (``over_reqwest``) on pyreqwest's httpx transport."""
    import httpx  # noqa: PLC0415

    transport = None
    if over_reqwest:
        from pyreqwest.client import ClientBuilder  # noqa: PLC0415
        from pyreqwest.compatibility.httpx import HttpxTransport  # noqa: PLC0415

        transport = HttpxTransport(ClientBuilder().max_connections(16).build())
    async with httpx.AsyncClient(base_url=url, timeout=None if over_reqwest else 10.0,
                                 limits=httpx.Limits(max_connections=16),
                                 transport=transport) as http:
        async def exchange(kind: str) -> None:
            method, path, params, body = _request(kind)
            resp = await http.request(method, path, headers=_headers(), params=params,
                                      content=body)
            _answered("httpx", kind, resp.status_code, resp.content)

        yield exchange


@contextlib.asynccontextmanager
async def _aiohttp(url: str) -> Any:
    import aiohttp  # noqa: PLC0415

    connector = aiohttp.TCPConnector(limit=16)
    async with aiohttp.ClientSession(connector=connector,
                                     timeout=aiohttp.ClientTimeout(total=None, sock_read=10)
                                     ) as http:
        async def exchange(kind: str) -> None:
            method, path, params, body = _request(kind)
            async with http.request(method, url + path, headers=_headers(), params=params,
                                    data=body, allow_redirects=False) as resp:
                content = await resp.read()
            _answered("aiohttp", kind, resp.status, content)

        yield exchange


@contextlib.asynccontextmanager
async def _pyreqwest(url: str) -> Any:
    from pyreqwest.client import ClientBuilder  # noqa: PLC0415

    async with ClientBuilder().max_connections(16).build() as http:
        async def exchange(kind: str) -> None:
            method, path, params, body = _request(kind)
            req = http.request(method, url + path).headers(_headers())
            if params:
                req = req.query(params)
            if body:
                req = req.body_bytes(body)
            async with req.build_streamed() as resp:
                content = await resp.bytes()
            _answered("pyreqwest", kind, resp.status, content)

        yield exchange


@contextlib.asynccontextmanager
async def _slurm_client(url: str) -> Any:
    from bridge.config import SlurmSettings  # noqa: PLC0415
    from bridge.slurm.client import SlurmClient  # noqa: PLC0415

    settings = SlurmSettings(url=url, user=BRIDGE_USER, token=TOKEN)
    req = _placeholder()
    async with SlurmClient(settings) as client:
        await client.connect()

        async def exchange(kind: str) -> None:
            if kind == "submit":
                assert await client.submit(req) == SUBMITTED
            elif kind == "poll":
                assert len(await client.job_states(POLL_IDS)) == len(POLL_IDS)
            else:
                job = await client.get_job(SMALL_JOB if kind == "read28" else LARGE_JOB)
                assert job.allocation is not None

        yield exchange


STACKS: dict[str, Callable[[str], Any]] = {
    "httpx": _httpx,
    "aiohttp": _aiohttp,
    "httpx over reqwest": functools.partial(_httpx, over_reqwest=True),
    "pyreqwest": _pyreqwest,
    "SlurmClient": _slurm_client,
}
HTTPX_STACKS = ("httpx", "httpx over reqwest", "SlurmClient")
DECODERS = ("decoding, pydantic", "decoding, msgspec struct")
SNIFFIO = "sniffio lookups per httpx request"


def _decoders() -> dict[str, dict[str, Callable[[bytes], object]]]:
    from bridge.slurm.wire.base import (  # noqa: PLC0415
        Envelope,
        JobsResponse,
        JobStatesResponse,
        SubmitResponse,
    )

    structs: dict[str, type[msgspec.Struct]] = {
        "submit": _Submitted, "read28": _Jobs, "read375": _Jobs, "poll": _States}
    models: dict[str, type[Envelope]] = {
        "submit": SubmitResponse, "read28": JobsResponse, "read375": JobsResponse,
        "poll": JobStatesResponse}
    return {
        "decoding, pydantic": {k: m.model_validate_json for k, m in models.items()},
        "decoding, msgspec struct": {k: msgspec.json.Decoder(s).decode
                                     for k, s in structs.items()},
    }


async def _measure(url: str, cfg: Config) -> dict[str, float]:
    """CPU µs per exchange (and per decode) of every cell, keyed ``stack|kind``."""
    cpu: dict[str, float] = {}
    done: dict[str, int] = {}
    lookups = _SniffioLookups()
    async with contextlib.AsyncExitStack() as stack:
        exchanges = {name: await stack.enter_async_context(make(url))
                     for name, make in STACKS.items()}
        for do in exchanges.values():  # warm-up: connections opened, caches filled
            for kind in KINDS:
                for _ in range(5):
                    await do(kind)
        sys.meta_path.insert(0, lookups)
        names = list(exchanges)
        for rnd in range(cfg.rounds):
            for name in names[rnd % len(names):] + names[:rnd % len(names)]:
                for kind in KINDS:
                    n = _count(kind, cfg) // cfg.rounds
                    gc.collect()
                    t0 = time.process_time()
                    for _ in range(n):
                        await exchanges[name](kind)
                    key = f"{name}|{kind}"
                    cpu[key] = cpu.get(key, 0.0) + time.process_time() - t0
                    done[key] = done.get(key, 0) + n
        sys.meta_path.remove(lookups)
    answers = bodies()
    for decoder, decode in _decoders().items():
        for kind in KINDS:
            n = _count(kind, cfg)
            decode[kind](answers[kind])
            gc.collect()
            t0 = time.process_time()
            for _ in range(n):
                decode[kind](answers[kind])
            cpu[f"{decoder}|{kind}"] = time.process_time() - t0
            done[f"{decoder}|{kind}"] = n
    result = {key: cpu[key] * 1e6 / done[key] for key in cpu}
    httpx_requests = sum(n for key, n in done.items() if key.split("|")[0] in HTTPX_STACKS)
    result[SNIFFIO] = lookups.count / max(httpx_requests, 1)
    return result


def child(url: str, cfg: Config) -> dict[str, float]:
    import uvloop  # noqa: PLC0415

    from bridge import logs  # noqa: PLC0415

    with open(os.devnull, "w") as sink, contextlib.redirect_stderr(sink):
        logs.configure("info", json=True)  # as the extender logs: one line per submit
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(_measure(url, cfg))


def _child(url: str, cfg: Config) -> dict[str, float]:
    return run_child("benchmarks.b7_exchanges", "B7 client", timeout=600, args=[
        "child", "--url", url, "--requests", str(cfg.requests), "--rounds", str(cfg.rounds)])


# -- figures ---------------------------------------------------------------------------------


class FigureMaker:
    """B7's two kinds of figure over the repeats' samples: a measured value, and a ratio of
    two held to the adoption rule."""

    def __init__(self, samples: list[dict[str, float]]) -> None:
        self.samples = samples

    def fig(self, name: str, unit: str, key: str) -> Figure:
        return Figure(name, unit, [s[key] for s in self.samples])

    def ratio(self, name: str, num: str, den: str, target: str) -> Figure:
        f = Figure(name, "x", [s[num] / s[den] for s in self.samples])
        at_least(f, ADOPT, target)
        return f


def _figures(samples: list[dict[str, float]]) -> list[Figure]:
    make = FigureMaker(samples)
    fig, ratio = make.fig, make.ratio
    figures: list[Figure] = []
    for kind in KINDS:
        label = LABELS[kind]
        figures += [fig(f"{label}: {name}", "µs", f"{name}|{kind}") for name in STACKS]
        for other, what in (("aiohttp", "aiohttp (bare)"), ("pyreqwest", "pyreqwest (bare)"),
                            ("httpx over reqwest", "httpx over reqwest")):
            figures.append(ratio(f"{label}: httpx / {what}", f"httpx|{kind}",
                                 f"{other}|{kind}", f">= {ADOPT:g}x: adopt {what}"))
        figures += [fig(f"{label}: {d} (alone)", "µs", f"{d}|{kind}") for d in DECODERS]
        figures.append(ratio(f"{label}: decoding, pydantic / msgspec struct",
                             f"{DECODERS[0]}|{kind}", f"{DECODERS[1]}|{kind}",
                             f">= {ADOPT:g}x: adopt the struct"))
    sniff = fig(f"{SNIFFIO} (a failed import retried)", "lookups", SNIFFIO)
    at_most(sniff, 0, "0 (sniffio installed)")
    figures.append(sniff)
    return figures


def _versions() -> str:
    return ", ".join(f"{m} {version(m)}" for m in
                     ("httpx", "httpcore", "aiohttp", "pyreqwest", "pydantic", "msgspec",
                      "uvloop"))


_CORE = b'"status"'  # one per core entry of a job answer


def notes(cfg: Config) -> list[str]:
    answers = bodies()
    sniffio = (f"importable ({version('sniffio')})" if importlib.util.find_spec("sniffio")
               else "NOT importable")
    return [
        f"Client CPU per exchange: `time.process_time()` of the client process over each "
        f"batch, divided by its exchanges; per repeat {cfg.requests} exchanges of each kind "
        f"per stack ({cfg.requests // 4} of the 375 kB read) in {cfg.rounds} interleaved "
        "rounds (stack order rotating), after 5 untimed of each; a fresh client process per "
        "repeat on uvloop (the extender's loop), keep-alive, one request in flight, "
        "loopback 127.0.0.1.",
        "Stand-in slurmrestd: its own process (uvloop, a minimal HTTP/1.1 protocol with "
        "fixed answers), started by the benchmark on a free port. Answer sizes: " + ", ".join(
            f"{k} {len(answers[k]):,} B" for k in KINDS) + "; job answers are v0.0.44-shaped "
        "running placeholders of the bridge (every field of the record, the per-core list "
        "sized to the answer sizes measured on Slurm 26.05: " + " and ".join(
            f"{answers[k].count(_CORE):,} core entries" for k in ("read28", "read375"))
        + " where the real answers list 64 and 1,250 larger ones; pretty-printed as "
        "slurmrestd writes without `SLURMRESTD_JSON=compact`).",
        "Bare stacks send the same method, path, query, credential headers and body bytes as "
        "SlurmClient and read the answer's bytes, nothing more; `SlurmClient (...)` is the "
        "bridge's own client (`submit`, `get_job`, `job_states`), credentials, retries, "
        "metrics, decoding with the pydantic wire models, conversion and the submit's log "
        "line (JSON, to /dev/null) included. Decoding alone: the bridge's pydantic wire "
        "model (`model_validate_json`) against a msgspec `Struct` declaring only the "
        "fields the bridge reads (a job's 12).",
        f"sniffio: {sniffio}; the lookups figure counts the times "
        "Python searched for it during the timed httpx exchanges (httpcore imports it on each "
        "request; a missing one is searched for every time).",
        f"Versions: {_versions()}. The verdicts apply issue 22's rule: adopt what wins by "
        f">= {ADOPT:g}x with every test green.",
        NOT_ADOPTED,
    ]


def run(cfg: Config) -> Outcome:
    import tempfile  # noqa: PLC0415

    from benchmarks import b7_kube  # noqa: PLC0415

    samples: list[dict[str, float]] = []
    kube_cfg = b7_kube.KubeConfig(requests=cfg.requests, rounds=cfg.rounds)
    with tempfile.TemporaryDirectory(prefix="b7-") as tmp:
        with stand_in(Path(tmp)) as url:
            for rep in range(cfg.repeats):
                sample = _child(url, cfg)
                samples.append(sample)
                print(f"  B7 repeat {rep + 1}/{cfg.repeats}: " + "; ".join(
                    f"{kind} " + " / ".join(f"{fmt(sample[f'{n}|{kind}'])}" for n in STACKS)
                    for kind in KINDS) + f" µs ({' / '.join(STACKS)})", flush=True)
        kube = b7_kube.measure(Path(tmp), kube_cfg, cfg.repeats,
                               lambda line: print(line, flush=True))
    return Outcome(bench="B7", title="CPU per exchange: slurmrestd, apiserver, extender served",
                   figures=_figures(samples) + b7_kube.figures(kube),
                   notes=notes(cfg) + b7_kube.notes(kube_cfg), repeats=cfg.repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description="B7 stand-in server and client (the runner's)")
    sub = parser.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--port", type=int, required=True)
    c = sub.add_parser("child")
    c.add_argument("--url", required=True)
    c.add_argument("--requests", type=int, default=Config.requests)
    c.add_argument("--rounds", type=int, default=Config.rounds)
    args = parser.parse_args()
    if args.cmd == "serve":
        serve(args.port)
    else:
        print(json.dumps(child(args.url, Config(requests=args.requests, rounds=args.rounds))))


if __name__ == "__main__":
    main()
