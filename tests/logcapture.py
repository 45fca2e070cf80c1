"""Capturing kuitti's log lines in a test.

``kuitti.logs`` configures structlog to cache each module's logger on first use, so
``structlog.testing.capture_logs`` sees nothing from a module that logged earlier in the
session: ``captured_logs`` configures a capture and gives the module a fresh logger."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from types import ModuleType

import pytest
import structlog
from structlog.testing import LogCapture


@contextlib.contextmanager
def captured_logs(
    monkeypatch: pytest.MonkeyPatch, module: ModuleType, level: int = logging.INFO
) -> Iterator[LogCapture]:
    """The lines ``module``'s ``log`` writes at ``level`` and above while the block runs."""
    saved = structlog.get_config()
    capture = LogCapture()
    structlog.configure(
        processors=[capture],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        cache_logger_on_first_use=False,
    )
    monkeypatch.setattr(module, "log", structlog.get_logger("kuitti"))
    try:
        yield capture
    finally:
        structlog.configure(**saved)
