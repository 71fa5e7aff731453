"""Stop tasks for good: a cancellation is delivered once, and a task whose code swallows it
(a library turning it into an error that a retry loop or ``except Exception`` absorbs) would
run on after the process was told to stop, holding the leader Lease and acting on a cluster
it no longer serves.  So each task still running after ``patience`` is logged with every
task's stack (the bug to report) and cancelled again, until it ends."""

import asyncio
import io
from collections.abc import Collection
from typing import Any

import structlog

log = structlog.get_logger(__name__)

PATIENCE_SECONDS = 2.0


async def cancel_and_wait(
    tasks: Collection["asyncio.Task[Any]"], *, patience: float = PATIENCE_SECONDS
) -> None:
    """Cancel ``tasks`` and return once every one has ended, whatever each raised.  Cancelled
    itself meanwhile (a stop of the stop), it finishes first: nothing is left running behind
    it; then it raises the cancellation."""
    pending = {task for task in tasks if not task.done()}
    told = interrupted = False
    while pending:
        for task in pending:
            task.cancel()
        try:
            _, pending = await asyncio.wait(pending, timeout=patience)
        except asyncio.CancelledError:
            interrupted = True
            pending = {task for task in pending if not task.done()}
            continue
        if pending and not told:
            told = True
            log.error("stop.task_outlived_cancel", tasks=sorted(t.get_name() for t in pending),
                      stacks=_stacks(), hint="a bug (a cancellation swallowed): report it "
                      "with these stacks; cancelling again")
    for task in tasks:
        if not task.cancelled():
            task.exception()  # retrieved: the caller decides what an ending means
    if interrupted:
        raise asyncio.CancelledError


def _stacks() -> dict[str, str]:
    """Every task's stack, by name: the swallowing may be in a child of the task named."""
    stacks: dict[str, str] = {}
    for task in asyncio.all_tasks():
        out = io.StringIO()
        task.print_stack(file=out)
        stacks[task.get_name()] = out.getvalue()
    return stacks
