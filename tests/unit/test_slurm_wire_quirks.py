"""What real slurmrestd sends on the wire that a strict HTTP client refuses, served by a raw
socket on 127.0.0.1 exactly as captured from Slurm 26.05.5's slurmrestd, through the
bridge's own HTTP client.

slurmrestd answers an error with two HTTP responses on one connection: the JSON one
(``Connection: Close``, its ``Content-Length``) and straight after it a second, plain-text
one.  A client that rejects data after ``Connection: close`` (aiohttp, whichever of its
parsers) loses the status and Slurm's words: the integration suite against the dockerized
26.05 failed four tests that way when the Slurm client ran on aiohttp (B7 had chosen it for
its CPU per exchange).  The bridge must read the first answer and ignore the rest."""

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from bridge.config import SlurmSettings
from bridge.jobs.owner import PodOwner
from bridge.jobs.request import JobRequest, SlurmPlacement
from bridge.slurm.client import SlurmClient
from bridge.slurm.errors import SlurmJobNotFound, SlurmRejected

PARSER = "v0.0.45"


def _answer(status: str, body: bytes, content_type: str, close: bool) -> bytes:
    head = f"HTTP/1.1 {status}\r\n" + ("Connection: Close\r\n" if close else "")
    head += f"Content-Length: {len(body)}\r\nContent-Type: {content_type}\r\n\r\n"
    return head.encode() + body


def _slurm_error(status: str, number: int, error: str, description: str) -> bytes:
    """An error as slurmrestd 26.05 writes it: the JSON answer, then a plain-text one."""
    body = json.dumps({"errors": [{"description": description, "error_number": number,
                                   "error": error, "source": "op_handler_job"}],
                       "warnings": [], "meta": {}}).encode()
    return (_answer(status, body, "application/json", close=True)
            + _answer(status, error.encode(), "text/plain", close=True))


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Keep-alive for what succeeds, slurmrestd's double answer for the rest."""
    try:
        while request := await reader.readuntil(b"\r\n\r\n"):
            line = request.split(b"\r\n", 1)[0].decode()
            length = next((int(h.split(b":")[1]) for h in request.split(b"\r\n")
                           if h.lower().startswith(b"content-length:")), 0)
            await reader.readexactly(length)
            path = line.split()[1]
            if path == "/openapi/v3":
                body = json.dumps({"paths": {f"/slurm/{PARSER}/jobs/": {}}}).encode()
                writer.write(_answer("200 OK", body, "application/json", close=False))
            elif path.endswith("/job/submit"):
                writer.write(_slurm_error("422 UNPROCESSABLE CONTENT", 2000,
                                          "Invalid partition name specified",
                                          "Batch job submission failed"))
                break
            else:
                writer.write(_slurm_error("404 NOT FOUND", 2017, "Invalid job id specified",
                                          "Invalid JobID=987654321 rejected"))
                break
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        await writer.drain()
        writer.close()


@asynccontextmanager
async def slurmrestd_26_05() -> AsyncIterator[SlurmClient]:
    server = await asyncio.start_server(_serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        settings = SlurmSettings(url=f"http://127.0.0.1:{port}", user="slurm", token="t",
                                 retries=0)
        async with SlurmClient(settings) as client:
            yield client
    finally:
        server.close()
        await server.wait_closed()


async def test_an_unknown_job_is_not_found_though_slurmrestd_answers_twice() -> None:
    async with slurmrestd_26_05() as client:
        with pytest.raises(SlurmJobNotFound):
            await client.get_job(987654321)


async def test_a_rejected_submit_carries_slurms_words_though_slurmrestd_answers_twice() -> None:
    request = JobRequest(name="k8s:ns/p", owner=PodOwner("uid-1"),
                         placement=SlurmPlacement(partition="nope"))
    async with slurmrestd_26_05() as client:
        with pytest.raises(SlurmRejected, match="Invalid partition name specified"):
            await client.submit(request)
