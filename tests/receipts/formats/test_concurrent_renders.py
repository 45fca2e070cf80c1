"""PDFs rendered in many threads at once: no error, and the same bytes as rendered alone.

reportlab's fonts are shared by every thread; writing a document's font subsets once raced
(a ``KeyError`` or ``IndexError`` in ``TTFontFile.makeSubset``, a 500 to a reader). The threads
here switch as often as the interpreter allows, and each receipt uses several hundred distinct
characters, so that each document spends long in its font subsets, where the race was."""

from __future__ import annotations

import contextlib
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from kuitti.receipts.formats import DataFormat, rendering
from kuitti.receipts.formats.layout import Layout
from kuitti.receipts.formats.rendering import render
from kuitti.services import Services
from tests.factories import auth, make_partner, product_row, receipt_doc, unsaved_receipt

THREADS = 50
# Latin, Greek and Cyrillic letters DejaVu has: each receipt draws a different 300 of them.
LETTERS = [chr(c) for c in (*range(0xC0, 0x250), *range(0x391, 0x3CA), *range(0x400, 0x460))]


def many_glyphs_doc(number: int) -> dict[str, Any]:
    start = number * 37 % len(LETTERS)
    letters = (LETTERS[start:] + LETTERS[:start])[:300]
    rows = [
        product_row("".join(letters[i : i + 30]), unit_price=100 + i, freeText="".join(letters))
        for i in range(0, 300, 30)
    ]
    return receipt_doc(rows, payments=False, receiptNumber=f"R-{number}")


@pytest.fixture
def switching_often() -> Iterator[None]:
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


def all_at_once(tasks: list[Callable[[], Any]]) -> list[Any]:
    """Run ``tasks`` on ``THREADS`` threads that start together; each result, or the text of
    the exception it raised."""
    start = threading.Barrier(min(THREADS, len(tasks)))

    def run(task: Callable[[], Any]) -> Any:
        with contextlib.suppress(threading.BrokenBarrierError):  # fewer left than threads
            start.wait(timeout=60)
        try:
            return task()
        except Exception as exc:  # every error is what the test counts
            return "".join(traceback.format_exception_only(exc))

    with ThreadPoolExecutor(THREADS) as pool:
        return list(pool.map(run, tasks))


@pytest.mark.usefixtures("switching_often")
def test_fifty_threads_render_the_same_pdfs_as_one(services: Services) -> None:
    poster = make_partner(services, iban="FI2112345600000785").partner
    receipts = [unsaved_receipt(many_glyphs_doc(n), ensure_ascii=False) for n in range(50)]
    formats = [DataFormat.SERVICE_PDF, DataFormat.FINVOICE_PDF]

    def task(index: int) -> Callable[[], bytes]:
        receipt, data_format = receipts[index // 2], formats[index % 2]
        return lambda: render(receipt, poster, data_format, layout=Layout.A4, locale="fi").content

    rendering.cache.clear()
    together = all_at_once([task(i) for i in range(2 * len(receipts))])
    errors = [r for r in together if isinstance(r, str)]
    assert errors == []
    rendering.cache.clear()
    alone = [task(i)() for i in range(2 * len(receipts))]
    assert [i for i, pdf in enumerate(together) if pdf != alone[i]] == []


@pytest.mark.usefixtures("switching_often")
def test_concurrent_readers_of_service_pdf_get_200(
    client: httpx.Client, services: Services
) -> None:
    merchant = make_partner(services, iban="FI2112345600000785")
    headers = auth(merchant.api_key)
    ids = [
        client.post("/api/v1/receipts/", json=many_glyphs_doc(n), headers=headers).json()[
            "receipt_id"
        ]
        for n in range(25)
    ]
    urls = [
        f"{client.base_url}/api/v1/receipts/{receipt_id}/{data_format}/?layout={layout}"
        for receipt_id in ids
        for data_format in ("service_pdf", "finvoice_pdf")
        for layout in ("a4", "roll")
    ]

    def read(url: str) -> Callable[[], int]:
        return lambda: httpx.get(url, headers=headers, timeout=120).status_code

    statuses = all_at_once([read(url) for url in urls])
    assert [s for s in statuses if s != 200] == []
