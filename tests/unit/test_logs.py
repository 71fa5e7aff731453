"""Every line a bridge process writes is one JSON object, uvicorn's own lines too (its error and
access loggers are the standard library's): a log pipeline parses them all alike.  Each case
runs in a process of its own, configured as ``slurmbridge`` configures itself, and reads what
that process wrote on stderr."""

import json
import os
import subprocess
import sys
from typing import Any

from slurmbridge_devkit.kube import REPO
from slurmbridge_devkit.processes import free_port

UVICORN = """
import asyncio, sys
import httpx, uvicorn
from fastapi import FastAPI
from bridge import logs
from bridge.draining import SERVING

logs.configure("info", json=True)
app = FastAPI()

@app.get("/ping")
async def ping() -> dict[str, str]:
    return {"ok": "yes"}

async def main(port: int) -> None:
    config = uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="off",
                            **{**SERVING, "access_log": True})
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    async with httpx.AsyncClient() as client:
        await client.get(f"http://127.0.0.1:{port}/ping")
    server.should_exit = True
    await serving

asyncio.run(main(int(sys.argv[1])))
"""

EXCEPTION = """
import logging
from bridge import logs

logs.configure("info", json=True)
try:
    raise ValueError("boom")
except ValueError:
    logging.getLogger("asyncio").exception("Task exception was never retrieved")
"""

HTTPS_SERVER = """
import asyncio, sys
import httpx
from prometheus_client import CollectorRegistry, Counter
from starlette.applications import Starlette
from starlette.routing import Route
from bridge import logs
from bridge.draining import DrainingServer, ServerConfig
from tests.served import listening

logs.configure("info", json=True)

async def fails(request):
    raise RuntimeError("the app failed")

async def main(port: int) -> None:
    config = ServerConfig(Counter("c", "unused", registry=CollectorRegistry()))
    config.bind = [f"127.0.0.1:{port}"]
    server = DrainingServer(Starlette(routes=[Route("/fails", fails)]), config, 0)
    serving = asyncio.create_task(server.serve())
    await listening(port, serving)
    async with httpx.AsyncClient() as client:
        assert (await client.get(f"http://127.0.0.1:{port}/fails")).status_code == 500
    server.handle_exit(15)
    await serving

asyncio.run(main(int(sys.argv[1])))
"""


def logged(script: str, *args: str) -> list[dict[str, Any]]:
    """The lines ``script`` wrote on stderr, each parsed as JSON (a line that is not fails)."""
    proc = subprocess.run([sys.executable, "-c", script, *args], capture_output=True,
                          text=True, check=False, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines, "nothing logged"
    objects = []
    for line in lines:
        try:
            objects.append(json.loads(line))
        except ValueError:
            raise AssertionError(f"a log line that is not JSON: {line!r}") from None
    return objects


def test_uvicorn_error_and_access_lines_are_json() -> None:
    lines = logged(UVICORN, str(free_port()))
    assert any(line.get("logger") == "uvicorn.error" and "Uvicorn running" in line["event"]
               for line in lines), lines
    assert any(line.get("logger") == "uvicorn.access" and "GET /ping" in line["event"]
               for line in lines), lines
    for line in lines:
        assert {"event", "level", "timestamp"} <= line.keys(), line


def test_a_standard_library_exception_is_one_json_line() -> None:
    (line,) = logged(EXCEPTION)
    assert line["level"] == "error" and line["logger"] == "asyncio"
    assert "ValueError: boom" in line["exception"]


def test_the_https_servers_error_is_one_json_line_and_no_request_is_logged() -> None:
    """Both faces' HTTPS server (granian): an app's exception through the standard library's
    logging, no access line (each review and bind is logged by the face itself)."""
    lines = logged(HTTPS_SERVER, str(free_port()))
    (error,) = [line for line in lines if line.get("logger", "").startswith("_granian")]
    assert error["level"] == "error" and "RuntimeError: the app failed" in error["event"]
    served = [line for line in lines if line.get("logger") != "httpx"]  # the test's client
    assert not [line for line in served if "/fails" in json.dumps(line)], lines
