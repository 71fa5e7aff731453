"""Waiting for the control plane, a process or Slurm to reach a state: polling a predicate."""

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any


async def wait_for(
    predicate: Callable[[], Any],
    timeout: float = 30.0,  # noqa: ASYNC109 - a deadline for polling, not for one await
    *,
    interval: float = 0.2,
    what: str = "condition",
) -> Any:
    """Poll `predicate` (sync or async) until it returns something truthy; return that.

    Polling, not watches: simple, and the control plane answers in milliseconds.
    """
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        last = value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")
        await asyncio.sleep(interval)
