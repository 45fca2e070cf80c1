"""Structured logs: one JSON object per line, with the request id bound for the request.

Every line is JSON, uvicorn's own included (``UVICORN_LOG_CONFIG``), and each is written to stderr
with one ``write(2)`` of the whole line (``write_line``), so the lines of several server processes
sharing the descriptor never glue together or split. No line holds a secret:
paths that carry one are logged with it replaced (``redact_path``), query strings are never
logged, and the database engine hides bound parameters from its errors (``kuitti.db``).
"""

from __future__ import annotations

import logging
import os
import re
from datetime import UTC, datetime
from typing import Any

import orjson
import structlog

from kuitti.clock import iso_utc

REDACTED = "<redacted>"
STDERR_FD = 2

# Routes whose path carries a secret: a password-reset or e-mail verification token, or a
# receipt's private link token (which shows the receipt without login).
_SECRET_PATHS = re.compile(r"^/(password-reset|verify-email|r)/[^/]+")


def redact_path(path: str) -> str:
    """The path as the access log may show it."""
    return _SECRET_PATHS.sub(lambda m: f"/{m.group(1)}/{REDACTED}", path)


def configure_logging(level: str = "INFO", *, json: bool = True) -> None:
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer(serializer=_json_line)
        if json
        else structlog.dev.ConsoleRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level)),
        logger_factory=LineLogger,
        cache_logger_on_first_use=True,
    )


def write_line(line: str) -> None:
    """``line`` and its newline in one ``write(2)`` on stderr's descriptor, past Python's buffers:
    ``print`` writes the text and the newline separately, and another process's line lands
    between them. The loop only continues after a partial write (a full disk, a signal)."""
    data = (line + "\n").encode()
    while data:
        data = data[os.write(STDERR_FD, data) :]


class LineLogger:
    """structlog's logger: every rendered event is one ``write_line``."""

    def __init__(self, *_args: Any) -> None:
        pass

    def msg(self, message: str) -> None:
        write_line(message)

    log = debug = info = warning = warn = error = err = critical = exception = fatal = msg


class LineHandler(logging.Handler):
    """The standard library's records (uvicorn's own) written as ``LineLogger`` writes ours."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            write_line(self.format(record))
        except Exception:  # a log line must never fail the request that logs it
            self.handleError(record)


def _json_line(event: dict[str, Any], **options: Any) -> str:
    """One event as compact JSON by orjson, as ``JsonLogFormatter`` writes uvicorn's lines:
    several times cheaper than the standard library's encoder for every request's line."""
    return orjson.dumps(event, **options).decode()


class JsonLogFormatter(logging.Formatter):
    """Standard-library records (uvicorn's own) as the same one-line JSON objects as ours."""

    def format(self, record: logging.LogRecord) -> str:
        event: dict[str, Any] = {
            "event": record.getMessage(),
            "logger": record.name,
            "level": record.levelname.lower(),
            "timestamp": iso_utc(datetime.fromtimestamp(record.created, UTC)),
        }
        if record.exc_info:
            event["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(event).decode()


UVICORN_LOG_CONFIG: dict[str, Any] = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": "kuitti.logs.JsonLogFormatter"}},
    "handlers": {"stderr": {"class": "kuitti.logs.LineHandler", "formatter": "json"}},
    "loggers": {
        "uvicorn": {"handlers": ["stderr"], "level": "INFO", "propagate": False},
        "uvicorn.error": {"level": "INFO"},
        # kuitti writes its own access line (with the request id and secrets redacted).
        "uvicorn.access": {"handlers": [], "level": "WARNING", "propagate": False},
    },
}


log = structlog.get_logger("kuitti")
