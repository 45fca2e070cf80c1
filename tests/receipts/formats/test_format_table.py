"""Every output format is one row of ``FORMATS``: its media type, file name and renderer, and the
read endpoint's API document lists each of them."""

from __future__ import annotations

from kuitti.app import create_app
from kuitti.receipts.formats import DataFormat
from kuitti.receipts.formats.rendering import FORMATS
from kuitti.services import Services


def test_every_format_has_one_row() -> None:
    assert list(FORMATS) == list(DataFormat)


def test_the_api_document_lists_every_format(services: Services) -> None:
    app = create_app(services.settings, db=services.db, clock=services.clock)
    read = app.openapi()["paths"]["/api/v1/receipts/{receipt_id}/{data_format}/"]["get"]
    for fmt, row in FORMATS.items():
        assert f"`{fmt}` ({row.description})" in read["description"]
        assert row.media_type.partition(";")[0] in read["responses"]["200"]["content"]
