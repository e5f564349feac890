"""Logging, configured once per process: structlog, JSON lines in containers, console locally.
Request context (request_id, model, version, worker) is bound through contextvars."""

import logging
import sys
from typing import Literal, TextIO

import structlog


def configure_logging(
    service: str,
    fmt: Literal["console", "json"] = "console",
    level: str = "info",
    stream: TextIO | None = None,
) -> None:
    """Log to ``stream`` (stderr unless given: the services' stderr is their log file)."""
    stream = stream or sys.stderr
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    )
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[*shared, structlog.processors.dict_tracebacks if fmt == "json" else _noop, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelNamesMapping()[level.upper()]),
        logger_factory=structlog.PrintLoggerFactory(stream),
        cache_logger_on_first_use=True,
    )
    structlog.contextvars.bind_contextvars(service=service)
    # Libraries (and TorchServe handlers) log through the standard library: same stream, one line each.
    logging.basicConfig(
        level=level.upper(),
        stream=stream,
        format=f"%(asctime)s {service} %(name)s %(levelname)s %(message)s",
    )


def _noop(
    logger: structlog.types.WrappedLogger, name: str, event: structlog.types.EventDict
) -> structlog.types.EventDict:
    return event


def get_logger(name: str | None = None) -> structlog.stdlib.BoundLogger:
    logger: structlog.stdlib.BoundLogger = structlog.get_logger(name)
    return logger
