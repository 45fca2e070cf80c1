"""A return and its purchase show their relation both ways: the PDFs (read back with pypdf), the
Finvoice (a credit note valid against the official XSD), the link page and the account page."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from sqlalchemy import select

from kuitti.models import ReceiptDelivery
from kuitti.services import Services
from tests.factories import auth, make_user, product_row, receipt_doc, token_body
from tests.oauth.flow import log_in
from tests.receipts.formats.support import (
    Poster,
    assert_valid_finvoice,
    fetch,
    pdf_text,
    post,
    poster,
)


def return_doc(original_id: str) -> dict[str, Any]:
    return receipt_doc(
        [product_row(quantity=-1)],
        payments=None,
        type="RETURN",
        receiptNumber="R-2026-0107",
        receiptTimeStamp="2026-01-16T10:00:00+02:00",
        originalReceiptId=original_id,
    )


@pytest.fixture
def who(services: Services) -> Poster:
    return poster(services)


def purchase_and_return(client: httpx.Client, who: Poster) -> tuple[str, str]:
    original = post(client, who, receipt_doc())
    return original, post(client, who, return_doc(original))


class TestPdfs:
    @pytest.mark.parametrize(
        ("lang", "return_line", "purchase_line"),
        [
            ("fi", "Palautus kuitista R-2026-0001", "Palautettu"),
            ("sv", "Retur av kvitto R-2026-0001", "Returnerad"),
            ("en", "Return of receipt R-2026-0001", "Returned on"),
        ],
    )
    def test_service_pdf_both_ways(
        self,
        client: httpx.Client,
        who: Poster,
        lang: str,
        return_line: str,
        purchase_line: str,
    ) -> None:
        original, refund = purchase_and_return(client, who)
        params = {"lang": lang}
        assert return_line in pdf_text(
            fetch(client, who, refund, "service_pdf", params=params).content
        )
        text = pdf_text(fetch(client, who, original, "service_pdf", params=params).content)
        assert purchase_line in text
        assert "R-2026-0107" in text

    def test_finvoice_pdf_both_ways(self, client: httpx.Client, who: Poster) -> None:
        original, refund = purchase_and_return(client, who)
        text = pdf_text(fetch(client, who, refund, "finvoice_pdf", params={"lang": "sv"}).content)
        assert "HYVITYSLASKU" in text
        assert "Retur av kvitto R-2026-0001" in text
        text = pdf_text(fetch(client, who, original, "finvoice_pdf", params={"lang": "en"}).content)
        assert "Returned on" in text
        assert "R-2026-0107" in text

    def test_the_purchase_changes_its_etag_when_returned(
        self, client: httpx.Client, who: Poster
    ) -> None:
        original = post(client, who, receipt_doc())
        before = fetch(client, who, original, "service_pdf")
        assert "Returned on" not in pdf_text(before.content)
        post(client, who, return_doc(original))
        after = fetch(
            client, who, original, "service_pdf", headers={"If-None-Match": before.headers["etag"]}
        )
        assert after.status_code == 200
        assert after.headers["etag"] != before.headers["etag"]
        assert "Returned on" in pdf_text(after.content)
        # The JSON is the document as posted: unchanged, same ETag.
        json_before = fetch(client, who, original, "service_json").headers["etag"]
        post(client, who, return_doc(original) | {"receiptNumber": "R-2026-0108"})
        assert fetch(client, who, original, "service_json").headers["etag"] == json_before


class TestFinvoice:
    def test_a_linked_return_is_a_credit_note_naming_the_purchase(
        self, client: httpx.Client, who: Poster
    ) -> None:
        original, refund = purchase_and_return(client, who)
        root = assert_valid_finvoice(fetch(client, who, refund, "finvoice_xml").content)
        details = root.find("InvoiceDetails")
        assert details is not None
        assert details.findtext("InvoiceTypeCode") == "INV02"
        assert details.findtext("InvoiceTypeText") == "HYVITYSLASKU"
        assert details.findtext("OriginalInvoiceNumber") == "R-2026-0001"
        assert details.findtext("OriginalInvoiceDate") == "20260115"
        purchase = assert_valid_finvoice(fetch(client, who, original, "finvoice_xml").content)
        texts = [t.text for t in purchase.iter("InvoiceFreeText")]
        assert "Palautettu / Returned 2026-01-16 10:00 (kuitti / receipt R-2026-0107)" in texts
        assert purchase.findtext("InvoiceDetails/InvoiceTypeCode") == "REC01"

    def test_an_unlinked_return_stays_a_credit_receipt(
        self, client: httpx.Client, who: Poster
    ) -> None:
        doc = return_doc("5d0c9c0e-3f0e-4b9e-9d55-2b8b8f6d2f11")  # no such receipt
        refund = post(client, who, doc)
        root = assert_valid_finvoice(fetch(client, who, refund, "finvoice_xml").content)
        assert root.findtext("InvoiceDetails/InvoiceTypeCode") == "REC02"
        assert root.find("InvoiceDetails/OriginalInvoiceNumber") is None


class TestPages:
    def test_link_pages_both_ways(
        self, client: httpx.Client, services: Services, who: Poster
    ) -> None:
        original = client.post("/api/v1/receipts/", json=receipt_doc(), headers=auth(who.api_key))
        refund = client.post(
            "/api/v1/receipts/",
            json=return_doc(original.json()["receipt_id"]),
            headers=auth(who.api_key),
        )
        english = {"Accept-Language": "en"}
        page = client.get(refund.json()["receipt_web_url"], headers=english)
        assert page.status_code == 200
        assert "Return of receipt R-2026-0001" in page.text
        page = client.get(original.json()["receipt_web_url"], headers={"Accept-Language": "fi"})
        assert "Palautettu" in page.text
        assert "(kuitti R-2026-0107)" in page.text

    def test_the_account_list_both_ways(
        self, client: httpx.Client, services: Services, who: Poster
    ) -> None:
        make_user(services, "maija@example.com")
        body = token_body(receipt_doc(), {"type": "EMAIL", "value": "maija@example.com"})
        original = client.post("/api/v1/receipts/", json=body, headers=auth(who.api_key))
        post(client, who, return_doc(original.json()["receipt_id"]))
        log_in(client, "maija@example.com")
        page = client.get("/account")
        assert "Return of receipt R-2026-0001" in page.text
        assert "Returned on" in page.text
        assert "(receipt R-2026-0107)" in page.text


class TestImport:
    def test_importing_a_purchase_from_its_link_imports_its_returns(
        self, client: httpx.Client, services: Services, who: Poster
    ) -> None:
        user = make_user(services, "maija@example.com")
        original = client.post("/api/v1/receipts/", json=receipt_doc(), headers=auth(who.api_key))
        refund = post(client, who, return_doc(original.json()["receipt_id"]))
        log_in(client, "maija@example.com")
        path = urlsplit(original.json()["receipt_web_url"]).path
        client.get(path)
        answer = client.post(
            path, data={"action": "import", "csrf_token": client.cookies["kuitti_csrf"]}
        )
        assert answer.status_code == 303
        with services.db.session(write=False) as session:
            held = session.scalars(
                select(ReceiptDelivery.receipt_id).where(ReceiptDelivery.user_id == user.id)
            )
            assert {str(r) for r in held} == {original.json()["receipt_id"], refund}
