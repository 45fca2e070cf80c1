"""service_pdf as read over HTTP: content read back with pypdf, codes scanned with zxing-cpp,
PDF/A-3 parts, layouts, languages, and the HTTP caching headers."""

from __future__ import annotations

import io
import json
from datetime import datetime
from typing import Any

import httpx
from pypdf import PdfReader

from kuitti.receipts.formats.rendering import cache
from kuitti.services import Services
from tests.factories import many_rows, product_row, receipt_doc
from tests.receipts.formats.support import (
    CODE128_DATA,
    EAN8_DATA,
    EAN13_DATA,
    QR_DATA,
    decoded_codes,
    fetch,
    minimal_doc,
    ocmf_key,
    pdf_pages_png,
    pdf_text,
    post,
    poster,
    rich_doc,
)


def _reader(content: bytes) -> PdfReader:
    return PdfReader(io.BytesIO(content))


class TestContent:
    def test_rich_receipt_text_is_extractable(
        self, client: httpx.Client, services: Services
    ) -> None:
        who = poster(services)
        doc = rich_doc(ocmf_key())
        receipt_id = post(client, who, doc)
        response = fetch(client, who, receipt_id, "service_pdf", params={"lang": "fi"})
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/pdf"
        text = pdf_text(response.content)
        pdf_pages_png(response.content, "service-a4-rich-fi")
        for expected in (
            "Kauppa Oy",
            "Kauppa Kamppi",
            "Y-tunnus 1234567-8",
            "Kahvi Presidentti 500 g",
            "Sateenvarjo",
            "Kanta-asiakasetu",
            "Taksimatka",
            "Rautatieasema → Lentoasema T2",
            "18,3 km",
            "ABC-123",
            "Paahtoaste: 3",
            "leimakortti",
            "Asiakasnumero: A-12345",
            "Kiitos käynnistä!",
            "415301******1234",
            "Korttimaksu",
            "Käteinen",
            "Arvonlisäverot",
            "25,5 %",
            "Pääsylippu",
            "Voimassa",
            "Allekirjoitus kelvollinen",
            "METER-0042",
            "12,345 kWh",
            "VARMENNUS A1B2C3",
        ):
            assert expected in text, expected
        total = doc["totalPriceIncVAT"]
        assert f"{total // 100},{total % 100:02d}" in text

    def test_minimal_receipt(self, client: httpx.Client, services: Services) -> None:
        who = poster(services, iban=False)
        receipt_id = post(client, who, minimal_doc())
        response = fetch(client, who, receipt_id, "service_pdf")
        assert response.status_code == 200
        text = pdf_text(response.content)
        assert "Pikku Oy" in text
        assert "Kahvi" in text
        assert "€5.99" in text
        pdf_pages_png(response.content, "service-a4-minimal")

    def test_five_hundred_rows_flow_over_pages(
        self, client: httpx.Client, services: Services
    ) -> None:
        who = poster(services)
        receipt_id = post(client, who, receipt_doc(many_rows(500)))
        response = fetch(client, who, receipt_id, "service_pdf")
        reader = _reader(response.content)
        assert len(reader.pages) > 5
        first = reader.pages[0].extract_text()
        last_pages = "".join(p.extract_text() for p in reader.pages[-4:])
        assert "Tuote 0" in first
        assert "Tuote 499" in last_pages
        assert f"Page {len(reader.pages)} / {len(reader.pages)}" in reader.pages[-1].extract_text()
        # The table header is repeated on the next page.
        assert "Unit price" in reader.pages[1].extract_text()

    def test_rtl_emoji_and_other_scripts(self, client: httpx.Client, services: Services) -> None:
        who = poster(services)
        rows = [
            product_row("Ωμέγα кофе 咖啡"),
            product_row("שלום עולם", unit_price=250),
            product_row("🎉 Juhla — “erä”", unit_price=100),
        ]
        doc = receipt_doc(rows, freeText="مرحبا 👋\nLine two\ttabbed")
        receipt_id = post(client, who, doc)
        for layout in ("a4", "roll"):
            response = fetch(client, who, receipt_id, "service_pdf", params={"layout": layout})
            assert response.status_code == 200
            text = pdf_text(response.content)
            assert "Ωμέγα кофе" in text
            pdf_pages_png(response.content, f"service-{layout}-scripts")

    def test_amounts_at_the_limits(self, client: httpx.Client, services: Services) -> None:
        who = poster(services)
        biggest = receipt_doc([product_row("Kallis", unit_price=10**15, rate="25.5")])
        refund = receipt_doc(
            [product_row("Palautus", unit_price=-(10**15), rate="25.5")],
            type="RETURN",
        )
        for doc, expected in (
            (biggest, "10,000,000,000,000.00"),
            (refund, "-€10,000,000,000,000.00"),
        ):
            receipt_id = post(client, who, doc)
            response = fetch(client, who, receipt_id, "service_pdf")
            assert response.status_code == 200
            assert expected in pdf_text(response.content)


class TestCodes:
    def test_every_code_scans_back_to_its_data(
        self, client: httpx.Client, services: Services
    ) -> None:
        who = poster(services)
        receipt_id = post(client, who, rich_doc())
        found: dict[str, set[tuple[str, str]]] = {}
        for layout in ("a4", "roll"):
            response = fetch(client, who, receipt_id, "service_pdf", params={"layout": layout})
            images = pdf_pages_png(response.content, f"service-{layout}-codes", dpi=200)
            found[layout] = set(decoded_codes(images))
        for codes in found.values():
            assert ("QRCode", QR_DATA) in codes
            assert ("EAN13", EAN13_DATA) in codes
            assert ("EAN8", EAN8_DATA) in codes
            assert ("Code128", CODE128_DATA) in codes


class TestPdfA:
    def test_metadata_fonts_and_embedded_json(
        self, client: httpx.Client, services: Services
    ) -> None:
        who = poster(services)
        doc = rich_doc()
        receipt_id = post(client, who, doc)
        content = fetch(client, who, receipt_id, "service_pdf").content
        reader = _reader(content)
        meta = reader.metadata
        assert meta is not None
        assert meta.title == "Receipt R-2026-0001 – Kauppa Oy"
        assert meta.author == "Kauppa Oy"
        assert meta.creation_date == datetime.fromisoformat(doc["receiptTimeStamp"])
        # The document carries its own data, byte for byte as posted.
        attachments = reader.attachments
        assert list(attachments) == ["receipt.json", "receipt.signed.json"]  # docs/signing.md
        assert json.loads(attachments["receipt.json"][0]) == doc
        root: Any = reader.trailer["/Root"]
        assert "/OutputIntents" in root
        assert root["/AF"][0].get_object()["/AFRelationship"] == "/Data"
        xmp = root["/Metadata"].get_object().get_data().decode()
        assert "<pdfaid:part>3</pdfaid:part>" in xmp
        assert "<pdfaid:conformance>B</pdfaid:conformance>" in xmp
        resources: Any = reader.pages[0]["/Resources"]
        fonts = resources["/Font"]
        for font in fonts.values():
            descriptor = font.get_object()["/FontDescriptor"].get_object()
            assert "/FontFile2" in descriptor, "fonts are embedded"

    def test_output_is_deterministic(self, client: httpx.Client, services: Services) -> None:
        who = poster(services)
        receipt_id = post(client, who, rich_doc(ocmf_key()))
        first = fetch(client, who, receipt_id, "service_pdf").content
        cache.clear()
        second = fetch(client, who, receipt_id, "service_pdf").content
        assert first == second


class TestLayoutsAndLanguages:
    def test_roll_is_one_narrow_page(self, client: httpx.Client, services: Services) -> None:
        who = poster(services)
        receipt_id = post(client, who, rich_doc())
        response = fetch(client, who, receipt_id, "service_pdf", params={"layout": "roll"})
        reader = _reader(response.content)
        assert len(reader.pages) == 1
        width = float(reader.pages[0].mediabox.width)
        height = float(reader.pages[0].mediabox.height)
        assert abs(width - 226.77) < 0.5  # 80 mm
        assert height > 600
        assert "Kahvi Presidentti 500 g" in pdf_text(response.content)
        pdf_pages_png(response.content, "service-roll-rich")

    def test_unknown_layout_is_rejected(self, client: httpx.Client, services: Services) -> None:
        who = poster(services)
        receipt_id = post(client, who, minimal_doc())
        response = fetch(client, who, receipt_id, "service_pdf", params={"layout": "a3"})
        assert response.status_code in (400, 422)

    def test_language_from_query_or_accept_language(
        self, client: httpx.Client, services: Services
    ) -> None:
        who = poster(services)
        receipt_id = post(client, who, receipt_doc())
        swedish = fetch(client, who, receipt_id, "service_pdf", params={"lang": "sv"})
        assert "Kvitto" in pdf_text(swedish.content)
        finnish = fetch(
            client, who, receipt_id, "service_pdf", headers={"Accept-Language": "fi-FI,en;q=0.5"}
        )
        text = pdf_text(finnish.content)
        assert "Kuitti" in text
        assert "8,49 €" in text
        english = fetch(client, who, receipt_id, "service_pdf")
        assert "Total VAT" in pdf_text(english.content)


class TestHttp:
    def test_etag_and_304(self, client: httpx.Client, services: Services) -> None:
        who = poster(services)
        receipt_id = post(client, who, receipt_doc())
        for fmt in ("service_json", "service_pdf", "finvoice_xml", "finvoice_pdf"):
            response = fetch(client, who, receipt_id, fmt)
            assert response.status_code == 200
            tag = response.headers["etag"]
            assert response.headers["cache-control"] == "private, no-cache"
            again = fetch(client, who, receipt_id, fmt, headers={"If-None-Match": tag})
            assert again.status_code == 304
            assert again.content == b""
            other = fetch(client, who, receipt_id, fmt, headers={"If-None-Match": '"nope"'})
            assert other.status_code == 200

    def test_etag_differs_by_layout_and_language(
        self, client: httpx.Client, services: Services
    ) -> None:
        who = poster(services)
        receipt_id = post(client, who, receipt_doc())
        tags = {
            fetch(client, who, receipt_id, "service_pdf", params=params).headers["etag"]
            for params in ({}, {"layout": "roll"}, {"lang": "fi"})
        }
        assert len(tags) == 3

    def test_pdf_has_a_filename(self, client: httpx.Client, services: Services) -> None:
        who = poster(services)
        receipt_id = post(client, who, receipt_doc(receiptNumber="R/2026 01"))
        response = fetch(client, who, receipt_id, "service_pdf")
        assert response.headers["content-disposition"] == 'inline; filename="receipt-R_2026_01.pdf"'
