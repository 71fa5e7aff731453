"""Structured logs: JSON lines in production, readable key=value on a terminal.

The standard library's loggers (uvicorn's error and access lines, asyncio's, the clients')
go through structlog's ``ProcessorFormatter``: the same renderer, so every line of a process
is one JSON object a log pipeline parses like the others.
"""

import logging
import sys

import structlog


def configure(level: str = "info", json: bool | None = None) -> None:
    as_json = (not sys.stderr.isatty()) if json is None else json
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if as_json else structlog.dev.ConsoleRenderer()
    )
    stamped: list[structlog.typing.Processor] = [
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    _route_stdlib(level, structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[structlog.stdlib.add_logger_name, *stamped],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    structlog.processors.format_exc_info, renderer],
    ))
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            *stamped,
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )


def _route_stdlib(level: str, formatter: structlog.stdlib.ProcessorFormatter) -> None:
    """One stderr handler on the root logger with ``formatter``, replacing the one an earlier
    call installed (handlers others added, a test runner's, stay)."""
    root = logging.getLogger()
    for old in [h for h in root.handlers
                if isinstance(h.formatter, structlog.stdlib.ProcessorFormatter)]:
        root.removeHandler(old)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for chatty in ("httpx2", "httpcore2"):  # lines per request
        logging.getLogger(chatty).setLevel(logging.WARNING)
