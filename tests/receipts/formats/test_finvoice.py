"""finvoice_xml and finvoice_pdf through the read endpoint; every generated document is validated
against the official Finvoice 3.0 XSD."""

from __future__ import annotations

import io
from decimal import Decimal
from typing import Any

import httpx
import pytest
import xmlschema
from lxml import etree
from pypdf import PdfReader

from kuitti.services import Services
from tests.factories import many_rows, product_row, receipt_doc
from tests.receipts.formats.support import (
    BIC,
    FINVOICE_XSD,
    IBAN,
    assert_valid_finvoice,
    fetch,
    minimal_doc,
    ocmf_key,
    pdf_pages_png,
    pdf_text,
    post,
    poster,
    rich_doc,
)


def finvoice(client: httpx.Client, services: Services, doc: dict[str, Any]) -> etree._Element:
    who = poster(services)
    receipt_id = post(client, who, doc)
    response = fetch(client, who, receipt_id, "finvoice_xml")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/xml; charset=ISO-8859-15"
    return assert_valid_finvoice(response.content)


def cents(text: str | None) -> int:
    assert text is not None
    return int(Decimal(text.replace(",", ".")) * 100)


class TestFinvoiceXml:
    def test_rich_receipt_maps_and_validates(
        self, client: httpx.Client, services: Services
    ) -> None:
        doc = rich_doc(ocmf_key())
        who = poster(services)
        receipt_id = post(client, who, doc)
        content = fetch(client, who, receipt_id, "finvoice_xml").content
        assert content.startswith(b'<?xml version="1.0" encoding="ISO-8859-15"?>')
        content.decode("iso-8859-15")  # real Latin-9 bytes throughout
        root = assert_valid_finvoice(content)
        # A second, independent validator agrees.
        xmlschema.XMLSchema(str(FINVOICE_XSD)).validate(root)

        details = root.find("InvoiceDetails")
        assert details is not None
        assert details.findtext("InvoiceTypeCode") == "REC01"
        assert details.findtext("InvoiceNumber") == "R-2026-0001"
        assert details.findtext("InvoiceDate") == "20260115"
        assert cents(details.findtext("InvoiceTotalVatIncludedAmount")) == doc["totalPriceIncVAT"]
        assert cents(details.findtext("InvoiceTotalVatExcludedAmount")) == doc["totalPriceExcVAT"]
        assert cents(details.findtext("InvoiceTotalVatAmount")) == doc["totalVATAmount"]
        rates = [v.findtext("VatRatePercent") for v in details.findall("VatSpecificationDetails")]
        assert sorted(r or "" for r in rates) == ["14", "25,5"]
        seller = root.find("SellerPartyDetails")
        assert seller is not None
        assert seller.findtext("SellerOrganisationName") == "Kauppa Oy"
        assert seller.findtext("SellerPartyIdentifier") == "1234567-8"
        assert seller.findtext("SellerOrganisationTaxCode") == "FI12345678"
        assert seller.findtext("SellerPostalAddressDetails/SellerTownName") == "Helsinki"
        assert root.findtext("PaymentStatusDetails/PaymentStatusCode") == "PAID"
        assert root.findtext("PaymentCardInfo/PrimaryAccountNumber") == "415301******1234"
        epi = root.find("EpiDetails")
        assert epi is not None
        assert epi.findtext("EpiPartyDetails/EpiBeneficiaryPartyDetails/EpiAccountID") == IBAN
        assert epi.findtext("EpiPartyDetails/EpiBfiPartyDetails/EpiBfiIdentifier") == BIC
        assert epi.findtext("EpiPaymentInstructionDetails/EpiInstructedAmount") == "0,00"

        rows = root.findall("InvoiceRow")
        # Five products, one of them with two VAT rates: six Finvoice rows.
        assert len(rows) == 6
        assert (
            sum(cents(r.findtext("RowVatExcludedAmount")) for r in rows) == doc["totalPriceExcVAT"]
        )
        assert sum(cents(r.findtext("RowAmount")) for r in rows) == doc["totalPriceIncVAT"]
        for spec in details.findall("VatSpecificationDetails"):
            rate = spec.findtext("VatRatePercent")
            same_rate = [r for r in rows if r.findtext("RowVatRatePercent") == rate]
            assert sum(cents(r.findtext("RowVatAmount")) for r in same_rate) == cents(
                spec.findtext("VatRateAmount")
            )
        coffee = rows[0]
        assert coffee.findtext("ArticleName") == "Kahvi Presidentti 500 g"
        assert coffee.findtext("EanCode") == "6412345678907"
        assert coffee.findtext("InvoicedQuantity") == "2"
        assert coffee.find("InvoicedQuantity").get("QuantityUnitCodeUN") == "C62"  # type: ignore[union-attr]
        assert coffee.findtext("UnitPriceVatIncludedAmount") == "5,99"
        umbrella = rows[1]
        assert umbrella.findtext("RowDiscountAmount") == "4,00"
        assert umbrella.findtext("RowDiscountPercent") == "20,1"
        charging = rows[5]
        assert charging.findtext("InvoicedQuantity") == "12,345"
        assert charging.find("InvoicedQuantity").get("QuantityUnitCodeUN") == "KWH"  # type: ignore[union-attr]
        free = [t.text for t in details.findall("InvoiceFreeText")]
        assert any("signature valid" in (t or "") for t in free)
        assert "VARMENNUS A1B2C3" in [
            t.text for t in root.findall("SpecificationDetails/SpecificationFreeText")
        ]

    def test_minimal_receipt(self, client: httpx.Client, services: Services) -> None:
        root = finvoice(client, services, minimal_doc())
        assert root.find("SellerPartyDetails/SellerPostalAddressDetails") is None
        assert root.findtext("BuyerPartyDetails/BuyerOrganisationName") == "Kuluttaja"

    def test_text_outside_latin9_survives_as_character_references(
        self, client: httpx.Client, services: Services
    ) -> None:
        names = ["Ωμέγα кофе 咖啡", "שלום עולם", "🎉 Juhla — “erä” €"]
        rows = [product_row(name, unit_price=100 + i) for i, name in enumerate(names)]
        doc = receipt_doc(rows, freeText="مرحبا 👋 Kiitos käynnistä!")
        root = finvoice(client, services, doc)
        assert [r.findtext("ArticleName") for r in root.findall("InvoiceRow")] == names
        free = [t.text for t in root.findall("InvoiceDetails/InvoiceFreeText")]
        assert "مرحبا 👋 Kiitos käynnistä!" in free

    def test_euro_sign_is_latin9_byte(self, client: httpx.Client, services: Services) -> None:
        who = poster(services)
        receipt_id = post(client, who, receipt_doc(freeText="Hinta 5 €"))
        content = fetch(client, who, receipt_id, "finvoice_xml").content
        assert b"Hinta 5 \xa4" in content  # € is 0xA4 in ISO-8859-15, not a reference

    def test_five_hundred_rows(self, client: httpx.Client, services: Services) -> None:
        root = finvoice(client, services, receipt_doc(many_rows(500)))
        assert len(root.findall("InvoiceRow")) == 500

    def test_amounts_at_the_limits(self, client: httpx.Client, services: Services) -> None:
        root = finvoice(
            client, services, receipt_doc([product_row("Kallis", unit_price=10**15, rate="25.5")])
        )
        assert root.findtext("InvoiceDetails/InvoiceTotalVatIncludedAmount") == "10000000000000,00"
        refund = finvoice(
            client,
            services,
            receipt_doc(
                [product_row("Palautus", unit_price=-(10**15), rate="25.5")], type="RETURN"
            ),
        )
        assert refund.findtext("InvoiceDetails/InvoiceTypeCode") == "REC02"
        assert refund.findtext("InvoiceDetails/InvoiceTypeText") == "HYVITYSKUITTI"
        assert (
            refund.findtext("InvoiceDetails/InvoiceTotalVatIncludedAmount") == "-10000000000000,00"
        )

    def test_date_is_the_finnish_date(self, client: httpx.Client, services: Services) -> None:
        root = finvoice(client, services, receipt_doc(receiptTimeStamp="2026-01-15T23:30:00Z"))
        assert root.findtext("InvoiceDetails/InvoiceDate") == "20260116"
        stamp = root.findtext("MessageTransmissionDetails/MessageDetails/MessageTimeStamp")
        assert stamp == "2026-01-15T23:30:00+00:00"

    def test_long_values_are_cut_to_the_schema_limits(
        self, client: httpx.Client, services: Services
    ) -> None:
        doc = receipt_doc(
            [product_row("N" * 300)],
            receiptNumber="2026-BRANCH-0042-POS-7-000123",
        )
        doc["merchant"]["name"] = "M" * 200
        doc["merchant"]["branch"]["address"]["streetAddress"] = "Katu " * 20
        doc["merchant"]["branch"]["address"]["country"] = "Finland"
        root = finvoice(client, services, doc)
        assert root.findtext("InvoiceDetails/InvoiceNumber") == "2026-BRANCH-0042-PO…"
        assert "2026-BRANCH-0042-POS-7-000123" in (
            root.findtext("InvoiceDetails/SellerReferenceIdentifier") or ""
        )
        assert len(root.findtext("SellerPartyDetails/SellerOrganisationName") or "") == 70
        assert len(root.findtext("InvoiceRow/ArticleName") or "") == 100
        assert root.findtext("SellerPartyDetails/SellerPostalAddressDetails/CountryCode") == "FI"

    def test_control_characters_and_whitespace(
        self, client: httpx.Client, services: Services
    ) -> None:
        doc = receipt_doc([product_row("  Kahvi\t\n  iso \u0001 ")], freeText="rivi 1\r\nrivi 2")
        root = finvoice(client, services, doc)
        assert root.findtext("InvoiceRow/ArticleName") == "Kahvi iso"

    @pytest.mark.parametrize("fmt", ["finvoice_xml", "finvoice_pdf"])
    def test_poster_without_iban_gets_409(
        self, client: httpx.Client, services: Services, fmt: str
    ) -> None:
        who = poster(services, iban=False)
        receipt_id = post(client, who, receipt_doc())
        response = fetch(client, who, receipt_id, fmt)
        assert response.status_code == 409
        assert response.json()["error"] == "finvoice_unavailable"
        assert "IBAN" in response.json()["decription"]


class TestFinvoicePdf:
    def test_drawn_from_the_finvoice(self, client: httpx.Client, services: Services) -> None:
        who = poster(services)
        doc = rich_doc(ocmf_key())
        receipt_id = post(client, who, doc)
        xml = fetch(client, who, receipt_id, "finvoice_xml").content
        response = fetch(client, who, receipt_id, "finvoice_pdf", params={"lang": "fi"})
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/pdf"
        reader = PdfReader(io.BytesIO(response.content))
        # The PDF carries the very Finvoice it shows.
        assert reader.attachments["finvoice.xml"][0] == xml
        text = pdf_text(response.content)
        pdf_pages_png(response.content, "finvoice-pdf-rich-fi")
        for expected in (
            "KUITTI",
            "Kauppa Oy",
            "Ostaja",
            "Kuluttaja",
            "Kahvi Presidentti 500 g",
            "Lahjapaketti",
            "Arvonlisäverot",
            "Maksettu",
            "KORTTI / CARD + KÄTEINEN / CASH",
            "415301******1234",
            "FI2112345600000785",
            "BIC NDEAFIHH",
            "VARMENNUS A1B2C3",
            "Maksettavaa",
        ):
            assert expected in text, expected
        total = doc["totalPriceIncVAT"]
        assert f"{total // 100},{total % 100:02d} EUR" in text

    def test_many_rows_and_other_scripts(self, client: httpx.Client, services: Services) -> None:
        who = poster(services)
        rows = [*many_rows(80), product_row("שלום 🎉 Ωμέγα")]
        receipt_id = post(client, who, receipt_doc(rows))
        response = fetch(client, who, receipt_id, "finvoice_pdf")
        reader = PdfReader(io.BytesIO(response.content))
        assert len(reader.pages) >= 2
        text = pdf_text(response.content)
        assert "Tuote 79" in text
        assert "Ωμέγα" in text
        pdf_pages_png(response.content, "finvoice-pdf-many")
