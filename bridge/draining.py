"""A uvicorn server that, told to stop, keeps serving a while and lets clients close first.

The API server and kube-scheduler reach the webhook and the extender through a Service.  A
replica told to stop still gets requests: over keep-alive connections opened before (an
established connection stays with its pod) and on new ones until every node's Service rules
drop it.  Closing an idle keep-alive connection races a request the client is just writing on
it: the client sees EOF and, for a POST, does not retry (a webhook call so lost refuses the
pod).  So after SIGTERM the server goes on serving for ``drain_seconds``, every response
saying ``Connection: close`` (the client drops that connection once the response is whole, and
its next request opens one the Service routes to a live replica); then it stops as uvicorn
does.  The same race, between uvicorn's idle timeout and a client reusing the connection, is
why the servers keep idle connections longer than those clients do.

Before it serves, a server stops on the first signal: uvicorn heeds one only once it serves,
and the parts a face serves from may take long to start (the extender waits for the
apiserver's Nodes), so their start is cancelled instead of making SIGTERM wait for it.
"""

import asyncio
import contextlib
import functools
import signal
import socket
import time
from collections.abc import Awaitable, Callable
from types import FrameType
from typing import Any, Protocol, cast

import structlog
import uvicorn
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = structlog.get_logger(__name__)

# Go's net/http, in the API server and kube-scheduler, drops a connection idle for 90 s; a
# server that keeps it longer never closes one under a request being written.
KEEP_ALIVE_SECONDS = 120
_CLOSE = (b"connection", b"close")
# How uvicorn serves the API server and kube-scheduler (B3 and B7 serve the same way).  No
# access log: each review and bind is logged structured, each filter at debug.
SERVING: dict[str, Any] = {
    "log_config": None, "access_log": False, "timeout_keep_alive": KEEP_ALIVE_SECONDS,
}
TICK_SECONDS = 0.1  # uvicorn's: how often its main loop looks for a signal


class Parts(Protocol):
    """What a face serves from, started before it listens and stopped after its last answer
    (the extender's ``Bridge``)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class DrainingServer(uvicorn.Server):
    """``uvicorn.Server`` whose first SIGTERM/SIGINT starts a drain once serving (before, it
    stops); a second stops at once."""

    def __init__(
        self, config: uvicorn.Config, drain_seconds: float, *, parts: Parts | None = None
    ) -> None:
        config.app = close_when(cast(ASGIApp, config.app), lambda: self._drain is not None)
        super().__init__(config)
        self.drain_seconds = drain_seconds
        self.parts = parts
        self._drain: tuple[float, int] | None = None  # (since, the signal that started it)
        self._drain_logged = False

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # Runs as a signal handler: set state only; on_tick and startup act on it.
        if self.drain_seconds <= 0 or self._drain is not None or not self.started:
            super().handle_exit(sig, frame)
        else:
            self._drain = (time.monotonic(), sig)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        if self.parts is not None and not await unless_stopped(self.parts.start(),
                                                              self._exit_asked()):
            log.info("stopped while starting: never served")
            await self.parts.stop()
            return  # not started: uvicorn neither serves nor shuts down
        await super().startup(sockets)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await super().shutdown(sockets)
        if self.parts is not None and not self.force_exit:  # as uvicorn skips the lifespan's
            await self.parts.stop()

    async def _exit_asked(self) -> None:
        while not self.should_exit:  # set by uvicorn's signal handler: no event to wait on
            await asyncio.sleep(TICK_SECONDS)

    async def on_tick(self, counter: int) -> bool:
        if self._drain is not None and not self.should_exit:
            since, sig = self._drain
            if not self._drain_logged:
                self._drain_logged = True
                log.info("draining: serving on, each connection closed after its response",
                         signal=signal.Signals(sig).name, seconds=self.drain_seconds)
            if time.monotonic() - since >= self.drain_seconds:
                super().handle_exit(sig, None)
        return await super().on_tick(counter)


async def unless_stopped(work: Awaitable[None], stop: Awaitable[object]) -> bool:
    """``work`` done (True), or cancelled because ``stop`` (a signal) came first (False)."""
    task, stopper = asyncio.ensure_future(work), asyncio.ensure_future(stop)
    try:
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
    if not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return False
    task.result()
    return True


def close_when(app: ASGIApp, draining: Callable[[], bool]) -> ASGIApp:
    """``app`` whose responses say ``Connection: close`` while ``draining()`` (an h2 server
    drops the header: h2 drains by GOAWAY)."""

    async def send_closing(send: Send, message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), _CLOSE]}
        await send(message)

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        # Nothing added per request until the drain starts: this wraps the hot path too.
        if scope["type"] != "http" or not draining():
            await app(scope, receive, send)
        else:
            await app(scope, receive, functools.partial(send_closing, send))

    return wrapped
