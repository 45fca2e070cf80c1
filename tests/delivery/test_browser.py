"""The receipt link page in a real browser (Debian chromium through Playwright): content,
language switch, scannable codes, PDF download, import with sign-up, accessibility (axe-core),
and screenshots at phone and desktop width under ``test-artifacts/``."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import httpx
import pytest
import zxingcpp
from PIL import Image
from playwright.sync_api import Browser, Page
from pypdf import PdfReader
from sqlalchemy import select

from kuitti.models import ReceiptLink, User
from kuitti.services import Services
from tests.browser import needs_chromium
from tests.conftest import LiveServer
from tests.delivery.support import make_merchant, owners, post_receipt
from tests.factories import card_payment, many_rows, product_row, receipt_doc, token_body

AXE = Path(__file__).parent / "vendor" / "axe.min.js"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"

pytestmark = needs_chromium


def rich_receipt() -> dict[str, Any]:
    taxi = product_row(
        "Taksimatka",
        unit_price=3240,
        rate="14",
        journey={
            "type": "TAXI",
            "id": "T-123",
            "distance": 12400,
            "duration": 22,
            "CO2Emissions": 1234,
            "origin": {
                "name": "Rautatientori",
                "city": "Helsinki",
                "datetime": "2026-01-15T13:30:00+02:00",
            },
            "destination": {
                "name": "Lentoasema",
                "city": "Vantaa",
                "datetime": "2026-01-15T13:52:00+02:00",
            },
            "vehicle": {
                "id": "V1",
                "licensePlate": "ABC-123",
                "make": "Toyota",
                "model": "Corolla",
            },
        },
    )
    coffee = product_row(
        "Kahvi 500 g",
        unit_price=599,
        quantity=2,
        categorization={"product": "1001", "tags": ["leimakortti"]},
        customAttributes=[{"Paahtoaste": "4"}],
        discounts=[{"amount": 100, "percentage": "8.3", "description": "Kanta-asiakasetu"}],
    )
    doc = receipt_doc(
        [coffee, taxi, *many_rows(3)],
        freeText="Kiitos käynnistä!",
        customAttributes=[{"Asiakasnumero": "998877"}],
        attachments=[
            {
                "type": "QRCODE",
                "kind": "TICKET",
                "title": "Lippu",
                "data": "KUITTI-TICKET-0001",
                "description": "Näytä lippu tarkastajalle.",
                "validUntil": "2026-01-16T00:00:00+02:00",
            },
            {
                "type": "BARCODE",
                "kind": "RETURN",
                "title": "Palautuskoodi",
                "data": "RET-20260115-0001",
            },
        ],
    )
    doc["payments"] = [card_payment(doc["totalPriceIncVAT"])]
    return doc


@pytest.fixture
def link(client: httpx.Client, services: Services, live_server: LiveServer) -> str:
    merchant = make_merchant(services, attachments=True)
    body = token_body(rich_receipt(), {"type": "RECEIPT_ID", "value": "B-1", "namespace": "kauppa"})
    response = post_receipt(client, merchant, body)
    assert response.status_code == 200, response.text
    url: str = response.json()["receipt_links"][0]
    return url


def new_page(browser: Browser, width: int, height: int, locale: str = "en-GB") -> Page:
    context = browser.new_context(
        viewport={"width": width, "height": height},
        locale=locale,
        accept_downloads=True,
        bypass_csp=True,  # lets the test inject axe-core; the page itself runs no script
    )
    return context.new_page()


def axe_violations(page: Page) -> list[dict[str, Any]]:
    page.add_script_tag(path=str(AXE))
    result: list[dict[str, Any]] = page.evaluate(
        """async () => (await axe.run(document, {resultTypes: ['violations']})).violations
            .map(v => ({id: v.id, impact: v.impact,
                        nodes: v.nodes.map(n => n.target.join(' '))}))"""
    )
    return result


def decode(image_png: bytes) -> list[str]:
    image = Image.open(io.BytesIO(image_png)).convert("L")
    return [r.text for r in zxingcpp.read_barcodes(image)]


class TestLinkPageInBrowser:
    def test_desktop_content_codes_language_pdf_and_accessibility(
        self, browser: Browser, link: str
    ) -> None:
        page = new_page(browser, 1280, 900)
        response = page.goto(link)
        assert response is not None
        assert response.status == 200
        assert page.locator("h1").inner_text() == "Kauppa Oy"
        text = page.locator("main").inner_text()
        for expected in (
            "Kahvi 500 g",
            "Kanta-asiakasetu",
            "leimakortti",
            "Paahtoaste",
            "Rautatientori",
            "Lentoasema",
            "1.2 kg",  # CO₂ (1234 g)
            "415301******1234",
            "VAT breakdown",
            "Kiitos käynnistä!",
            "Lippu",
        ):
            assert expected in text, expected
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "receipt-link-desktop.png"), full_page=True)
        # The attachments are real codes: a scanner reads them off the rendered page.
        codes = page.locator(".code")
        assert codes.count() == 2
        assert decode(codes.nth(0).screenshot()) == ["KUITTI-TICKET-0001"]
        assert decode(codes.nth(1).screenshot()) == ["RET-20260115-0001"]

        serious = [v for v in axe_violations(page) if v["impact"] in ("serious", "critical")]
        assert serious == []
        # Printing leaves out the buttons and the language switch, keeps the receipt.
        page.emulate_media(media="print")
        assert not page.get_by_role("link", name="Download PDF").is_visible()
        assert not page.locator("nav.languages").is_visible()
        assert page.get_by_text("VAT breakdown").is_visible()
        page.emulate_media(media="screen")

        page.get_by_role("link", name="Suomi").click()
        page.wait_for_url("**?lang=fi")
        assert page.locator("html").get_attribute("lang") == "fi"
        assert "Arvonlisäverot" in page.locator("main").inner_text()
        with page.expect_download() as download_info:
            page.get_by_role("link", name="Lataa PDF").click()
        download = download_info.value
        assert download.suggested_filename.endswith(".pdf")
        path = download.path()
        pdf = PdfReader(str(path))
        pdf_text = "\n".join(p.extract_text() for p in pdf.pages)
        assert "Kauppa Oy" in pdf_text
        assert "Kahvi 500 g" in pdf_text
        page.context.close()

    def test_phone_width_and_import_with_sign_up(
        self, browser: Browser, link: str, services: Services
    ) -> None:
        page = new_page(browser, 360, 740, locale="sv-FI")
        page.goto(link)
        assert page.locator("html").get_attribute("lang") == "sv"
        # Nothing wider than the phone: no sideways scrolling.
        assert page.evaluate("document.documentElement.scrollWidth") <= 360
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "receipt-link-phone.png"), full_page=True)
        serious = [v for v in axe_violations(page) if v["impact"] in ("serious", "critical")]
        assert serious == []

        page.get_by_role("button", name="Importera till mitt konto").click()
        page.wait_for_url("**/login?next=*")
        page.locator("input[name=email]").fill("uusi@example.com")
        page.locator("input[name=password]").fill("correct horse 1")
        page.locator("button[value=signup]").click()
        page.wait_for_url(link)
        page.get_by_role("button", name="Importera till mitt konto").click()
        page.wait_for_url("**imported=1")
        assert "Kvittot finns nu på ditt konto." in page.locator("main").inner_text()
        page.screenshot(path=str(ARTIFACTS / "receipt-link-imported-phone.png"))
        with services.db.session(write=False) as session:
            user = session.scalar(select(User).where(User.email == "uusi@example.com"))
            receipt = session.get(ReceiptLink, ("kauppa", "B-1"))
            assert user is not None
            assert receipt is not None
        assert owners(services, str(receipt.receipt_id)) == [user.id]
        page.context.close()

    def test_not_found_page(self, browser: Browser, live_server: LiveServer) -> None:
        page = new_page(browser, 360, 740, locale="fi-FI")
        response = page.goto(f"{live_server.url}/ns/kauppa/r/nothing-here")
        assert response is not None
        assert response.status == 404
        assert page.locator("h1").inner_text() == "Kuittia ei löytynyt"
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "receipt-link-404-phone.png"))
        serious = [v for v in axe_violations(page) if v["impact"] in ("serious", "critical")]
        assert serious == []
        page.context.close()
