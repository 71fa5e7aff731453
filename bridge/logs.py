"""Structured logs: JSON lines in production, readable key=value on a terminal."""

import logging
import sys

import structlog


def configure(level: str = "info", json: bool | None = None) -> None:
    as_json = (not sys.stderr.isatty()) if json is None else json
    logging.basicConfig(stream=sys.stderr, level=level.upper(), format="%(message)s")
    for chatty in ("httpx2", "httpcore2"):  # lines per request: too many
        logging.getLogger(chatty).setLevel(logging.WARNING)
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if as_json else structlog.dev.ConsoleRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )
