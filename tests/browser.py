"""Debian's chromium through Playwright, launched the one way every browser test uses.

Browser tests take the module-scoped ``browser`` fixture (``tests/conftest.py``) and carry the
``browser`` marker, which ``tests/conftest.py`` turns into a skip where the binary is missing.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from playwright.sync_api import Browser, sync_playwright

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]

needs_chromium = pytest.mark.browser


@contextmanager
def launch_chromium() -> Iterator[Browser]:
    """A headless chromium for the duration of the ``with`` block."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()
