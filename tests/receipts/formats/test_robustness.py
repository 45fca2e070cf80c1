"""Any valid receipt renders in every format, and every Finvoice validates: property tests over
arbitrary text (any Unicode, control characters, RTL, emoji), quantities, VAT rates and amounts.
Rendering runs in-process here (the HTTP path is covered by the other tests)."""

from __future__ import annotations

import io
import uuid
from decimal import Decimal
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pypdf import PdfReader

from kuitti.models import Partner
from kuitti.receipts.formats import DataFormat
from kuitti.receipts.formats.layout import Layout
from kuitti.receipts.formats.rendering import cache, render
from kuitti.receipts.schema import Receipt as ReceiptDocument
from tests.factories import product_row, receipt_doc, unsaved_receipt
from tests.receipts.formats.support import assert_valid_finvoice

texts = st.text(min_size=0, max_size=120)
names = st.text(min_size=1, max_size=300)
rates = st.sampled_from(["0", "10", "14", "24", "25.5", "25.50", "0.001", "99.9999", "150"])
quantities = st.decimals(
    min_value=Decimal("-99999"), max_value=Decimal("99999"), places=4, allow_nan=False
).map(lambda d: format(d.normalize(), "f"))


@st.composite
def documents(draw: st.DrawFn) -> dict[str, Any]:
    rows = []
    for _ in range(draw(st.integers(min_value=1, max_value=6))):
        row = product_row(
            draw(names),
            unit_price=draw(st.integers(min_value=-(10**13), max_value=10**13)),
            rate=draw(rates),
            quantityCode=draw(st.sampled_from(["pcs", "kg", "l", "kWh", "ämpäri", ""])),
        )
        row["quantity"] = draw(quantities)
        if draw(st.booleans()):
            row["freeText"] = draw(texts)
        if draw(st.booleans()):
            row["customAttributes"] = [{draw(names): draw(texts)}]
        if draw(st.booleans()):
            row["discounts"] = [{"amount": 100, "description": draw(texts)}]
        rows.append(row)
    doc = receipt_doc(rows)
    doc["merchant"]["name"] = draw(texts)
    doc["merchant"]["companyID"] = draw(texts)
    doc["merchant"]["branch"]["address"]["streetAddress"] = draw(texts)
    doc["merchant"]["branch"]["address"]["country"] = draw(texts)
    doc["receiptNumber"] = draw(names.filter(lambda s: s.strip() != ""))
    doc["freeText"] = draw(texts)
    doc["currencyISOCode"] = draw(st.sampled_from(["EUR", "SEK", "JPY", "KWD"]))
    doc["payments"][0]["attributes"]["currencyISOCode"] = doc["currencyISOCode"]
    doc["payments"][0]["attributes"]["transactionRawText"] = draw(texts)
    doc["attachments"] = [
        {"type": "BARCODE", "kind": "VOUCHER", "title": draw(texts), "data": draw(names)},
        {"type": "QRCODE", "kind": "TICKET", "title": draw(texts), "data": draw(names)},
    ]
    doc["verifications"] = [
        {
            "type": "OCMF",
            "version": draw(texts),
            "publicKey": draw(texts),
            "transactionId": draw(texts),
            "currentType": "DC",
            "transactionEnd": {"signedData": "OCMF|" + draw(texts) + "|" + draw(texts)},
        }
    ]
    return doc


POSTER = Partner(id=uuid.uuid4(), name="Kauppa Oy", iban="FI2112345600000785", bic="NDEAFIHH")


class TestAnyReceipt:
    @settings(
        max_examples=15,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(documents())
    def test_every_format_is_valid(self, doc: dict[str, Any]) -> None:
        ReceiptDocument.model_validate(doc)  # the generator only makes valid documents
        receipt = unsaved_receipt(doc)
        cache.clear()
        xml = render(receipt, POSTER, DataFormat.FINVOICE_XML).content
        assert_valid_finvoice(xml)
        for fmt, layout in (
            (DataFormat.SERVICE_PDF, Layout.A4),
            (DataFormat.SERVICE_PDF, Layout.ROLL),
            (DataFormat.FINVOICE_PDF, Layout.A4),
        ):
            content = render(receipt, POSTER, fmt, layout=layout, locale="fi").content
            reader = PdfReader(io.BytesIO(content))
            assert len(reader.pages) >= 1
            assert reader.pages[0].extract_text()
