"""The network cut between the bridge and slurmrestd, as a relay in the harness.

The bridge reaches slurmrestd through this TCP relay (its ``slurm.url`` points here).  A cut
stops relaying in both directions without closing anything: bytes wait in the kernel's
buffers as dropped packets wait for retransmission, so the bridge sees what a drop rule
shows it (requests that hang until its own timeouts), and after the cut what is still open
goes on.  A new connection during the cut is accepted but hears nothing (with a drop rule its
handshake would hang instead: the bridge's connect timeout becomes a read timeout).  Only
127.0.0.1 is involved; no namespace, no firewall rule.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

CHUNK = 65536


@dataclass
class Relay:
    upstream_host: str
    upstream_port: int
    port: int = 0  # where the bridge connects (set by start)
    _open: asyncio.Event = field(default_factory=asyncio.Event)  # set: not cut
    _server: asyncio.Server | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def start(self) -> None:
        self._open.set()
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def cut(self) -> None:
        self._open.clear()

    def heal(self) -> None:
        self._open.set()

    async def close(self) -> None:
        self.heal()
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        await self._open.wait()  # a connection made during the cut waits for its end
        try:
            up_r, up_w = await asyncio.open_connection(self.upstream_host, self.upstream_port)
        except OSError:  # slurmrestd is down: the bridge sees the connection close
            client_w.close()
            return
        pumps = [asyncio.create_task(self._pump(client_r, up_w)),
                 asyncio.create_task(self._pump(up_r, client_w))]
        self._tasks.update(pumps)
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in pumps:
                task.cancel()
                self._tasks.discard(task)
            for writer in (client_w, up_w):
                writer.close()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while True:
                await self._open.wait()  # nothing read during a cut, not even a close
                data = await reader.read(CHUNK)
                if not data:
                    return
                await self._open.wait()
                writer.write(data)
                await writer.drain()
