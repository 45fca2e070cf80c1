"""The receipt link pages over HTTP: content, languages, headers, 404s, rate limit, escaping,
long receipts, PDF download and import into an account."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import orjson
import pytest

from kuitti.clock import FrozenClock
from kuitti.models import User
from kuitti.partners.service import NewPartner
from kuitti.services import Services
from tests.conftest import LiveServer, free_port
from tests.delivery.support import connect, make_app, make_merchant, owners, post_receipt, webhooks
from tests.factories import card_payment, many_rows, product_row, receipt_doc, token_body

EVIL = "<script>alert('x')</script>"


def link_receipt(
    client: httpx.Client, merchant: NewPartner, identifier: str = "L-1", **doc: Any
) -> dict[str, Any]:
    body = token_body(
        receipt_doc(**doc), {"type": "RECEIPT_ID", "value": identifier, "namespace": "kauppa"}
    )
    response = post_receipt(client, merchant, body)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def path_of(url: str) -> str:
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")


def login(client: httpx.Client, email: str, password: str = "correct horse 1") -> None:
    client.get("/login")
    response = client.post(
        "/login",
        data={
            "email": email,
            "password": password,
            "action": "login",
            "next": "/account",
            "csrf_token": client.cookies["kuitti_csrf"],
        },
    )
    assert response.status_code == 303, response.text


class TestLinkPage:
    def test_shows_the_receipt_with_link_safety_headers(
        self, client: httpx.Client, merchant: NewPartner
    ) -> None:
        link_receipt(client, merchant, freeText="Kiitos käynnistä!")
        page = client.get("/ns/kauppa/r/L-1", headers={"Accept-Language": "en-GB,en;q=0.8"})
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        assert page.headers["x-robots-tag"] == "noindex, nofollow"
        assert page.headers["referrer-policy"] == "no-referrer"
        html = page.text
        assert '<html lang="en">' in html
        for expected in (
            "Kauppa Oy",
            "Kauppa Kamppi",
            "Kahvi 500 g",
            "Pulla",
            "R-2026-0001",
            "€8.49",  # the receipt's currency in the reader's (English) style
            "415301******1234",
            "Kiitos käynnistä!",
            "VAT breakdown",
            'href="/ns/kauppa/r/L-1/pdf"',
            'name="action" value="import"',
        ):
            assert expected in html, expected

    def test_language_follows_accept_language_and_can_be_switched(
        self, client: httpx.Client, merchant: NewPartner
    ) -> None:
        link_receipt(client, merchant)
        swedish = client.get("/ns/kauppa/r/L-1", headers={"Accept-Language": "sv-FI, fi;q=0.5"})
        assert '<html lang="sv">' in swedish.text
        assert "Momsspecifikation" in swedish.text
        assert "8,49\xa0€" in swedish.text
        finnish = client.get("/ns/kauppa/r/L-1?lang=fi", headers={"Accept-Language": "sv"})
        assert '<html lang="fi">' in finnish.text
        assert "Arvonlisäverot" in finnish.text
        # Links on a switched page keep the language.
        assert 'href="/ns/kauppa/r/L-1/pdf?lang=fi"' in finnish.text
        assert 'action="/ns/kauppa/r/L-1?lang=fi"' in finnish.text
        assert 'href="/ns/kauppa/r/L-1?lang=sv"' in finnish.text

    def test_an_unknown_language_falls_back_to_the_browsers(
        self, client: httpx.Client, merchant: NewPartner
    ) -> None:
        link_receipt(client, merchant)
        page = client.get("/ns/kauppa/r/L-1?lang=" + "x" * 50, headers={"Accept-Language": "fi"})
        assert page.status_code == 200
        assert '<html lang="fi">' in page.text

    def test_private_link_shows_the_same_receipt(
        self, client: httpx.Client, merchant: NewPartner
    ) -> None:
        created = link_receipt(client, merchant)
        page = client.get(path_of(created["receipt_web_url"]))
        assert page.status_code == 200
        assert "Kahvi 500 g" in page.text

    def test_identifier_with_slash_and_spaces(
        self, client: httpx.Client, merchant: NewPartner
    ) -> None:
        created = link_receipt(client, merchant, identifier="2026/01 15#7")
        [link] = created["receipt_links"]
        assert link.endswith("/ns/kauppa/r/2026%2F01%2015%237")
        assert client.get(path_of(link)).status_code == 200
        assert client.get(path_of(link) + "/pdf").status_code == 200
        unicode = link_receipt(client, merchant, identifier="Kassa-ä/1", receiptNumber="R-ä")
        assert client.get(path_of(unicode["receipt_links"][0])).status_code == 200

    def test_every_text_field_is_escaped(self, client: httpx.Client, services: Services) -> None:
        merchant = make_merchant(services, attachments=True)
        row = product_row(
            EVIL,
            freeText=EVIL,
            EANCode=EVIL,
            productId=EVIL,
            categorization={"product": EVIL, "tags": [EVIL]},
            customAttributes=[{EVIL: EVIL}],
            journey={
                "type": "TAXI",
                "id": EVIL,
                "origin": {"name": EVIL, "city": EVIL},
                "destination": {"name": EVIL},
                "vehicle": {"id": EVIL, "licensePlate": EVIL},
            },
        )
        doc = receipt_doc(
            [row],
            payments=[card_payment(row["totalAmountIncVAT"], terminalId=EVIL)],
            freeText=EVIL,
            receiptNumber=EVIL,
            customAttributes=[{EVIL: EVIL}],
            attachments=[
                {
                    "type": "QRCODE",
                    "kind": "VOUCHER",
                    "title": EVIL,
                    "data": EVIL,
                    "description": EVIL,
                }
            ],
        )
        doc["merchant"]["name"] = EVIL
        doc["merchant"]["branch"]["name"] = EVIL
        body = token_body(doc, {"type": "RECEIPT_ID", "value": EVIL, "namespace": "kauppa"})
        created = post_receipt(client, merchant, body)
        assert created.status_code == 200, created.text
        page = client.get(path_of(created.json()["receipt_links"][0]))
        assert page.status_code == 200
        assert "<script>alert" not in page.text
        assert page.text.count("&lt;script&gt;alert(") >= 15

    def test_shows_the_verification_block(self, client: httpx.Client, merchant: NewPartner) -> None:
        verification = {
            "type": "OCMF",
            "version": "1.0",
            "publicKey": "3059301306072a8648ce3d020106082a8648ce3d03010703420004aa",
            "transactionId": "TX-42",
            "currentType": "DC",
            "transactionEnd": {"signedData": "OCMF|{}|{}"},
        }
        link_receipt(client, merchant, verifications=[verification])
        page = client.get("/ns/kauppa/r/L-1")
        assert page.status_code == 200
        assert "Meter verification" in page.text
        assert "TX-42" in page.text
        assert "Could not verify" in page.text or "Signature invalid" in page.text

    def test_a_very_long_receipt_stays_usable(
        self, client: httpx.Client, merchant: NewPartner
    ) -> None:
        link_receipt(client, merchant, rows=many_rows(2000))
        page = client.get("/ns/kauppa/r/L-1")
        assert page.status_code == 200
        assert "Tuote 0" in page.text
        assert "Tuote 1999" in page.text
        # The total is near the top; the rows past the first ones wait behind a disclosure.
        assert page.text.index('class="grand-total"') < page.text.index("Tuote 0")
        assert "<details" in page.text


class TestNotFound:
    def test_unknown_and_foreign_links_are_one_friendly_404(
        self, client: httpx.Client, services: Services, merchant: NewPartner
    ) -> None:
        link_receipt(client, merchant)
        make_merchant(services, "Toinen Oy", namespaces=["toinen"])
        pages = [
            client.get(path)
            for path in (
                "/ns/toinen/r/L-1",  # a real identifier of another namespace
                "/ns/nowhere/r/L-1",
                "/ns/kauppa/r/L-2",
                "/ns/kauppa/r/L-1/extra",
                "/ns/kauppa/r/L-2/pdf",
                "/r/not-a-token",
                "/r/" + "A" * 43,
                "/r/not-a-token/pdf",
            )
        ]
        assert [p.status_code for p in pages] == [404] * len(pages)
        for page in pages:
            assert page.headers["content-type"].startswith("text/html")
            assert "Receipt not found" in page.text
            assert page.headers["x-robots-tag"] == "noindex, nofollow"
        # Apart from the language links back to each address, the answers are the same.
        mains = {p.text[p.text.index("<main") :] for p in pages[:3]}
        assert len(mains) == 1

    def test_a_tampered_private_token_is_404(
        self, client: httpx.Client, merchant: NewPartner
    ) -> None:
        created = link_receipt(client, merchant)
        path = path_of(created["receipt_web_url"])
        tampered = path[:-2] + ("AA" if not path.endswith("AA") else "BB")
        assert client.get(tampered).status_code == 404

    def test_404_speaks_the_readers_language_and_can_switch(self, client: httpx.Client) -> None:
        page = client.get("/ns/x/r/y%2Fz", headers={"Accept-Language": "fi"})
        assert "Kuittia ei löytynyt" in page.text
        assert 'href="/ns/x/r/y%2Fz?lang=sv"' in page.text
        swedish = client.get("/ns/x/r/y%2Fz?lang=sv", headers={"Accept-Language": "fi"})
        assert "Kvittot hittades inte" in swedish.text


class TestRateLimit:
    @pytest.fixture
    def limited(self, services: Services) -> Iterator[str]:
        settings = services.settings.model_copy(update={"link_rate_limit_per_minute": 3})
        with LiveServer(
            Services(settings=settings, db=services.db, clock=services.clock), free_port()
        ) as server:
            yield server.url

    def test_link_pages_are_limited_per_client(
        self, limited: str, clock: FrozenClock, merchant: NewPartner, client: httpx.Client
    ) -> None:
        link_receipt(client, merchant)
        clock.set(clock.now().replace(second=0))
        with httpx.Client(base_url=limited) as http:
            codes = [http.get("/ns/kauppa/r/L-1").status_code for _ in range(3)]
            refused = http.get("/ns/nowhere/r/guess")
            assert codes == [200, 200, 200]
            assert refused.status_code == 429
            assert int(refused.headers["retry-after"]) == 60
            assert refused.headers["x-robots-tag"] == "noindex, nofollow"
            clock.advance(60)
            assert http.get("/ns/kauppa/r/L-1").status_code == 200


class TestPdf:
    def test_download_is_an_attachment(self, client: httpx.Client, merchant: NewPartner) -> None:
        link_receipt(client, merchant)
        response = client.get("/ns/kauppa/r/L-1/pdf")
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/pdf"
        disposition = response.headers["content-disposition"]
        assert re.fullmatch(r'attachment; filename="receipt-R-2026-0001\.pdf"', disposition)
        assert response.content.startswith(b"%PDF")
        assert response.headers["x-robots-tag"] == "noindex, nofollow"

    def test_a_long_receipt_pdf(self, client: httpx.Client, merchant: NewPartner) -> None:
        link_receipt(client, merchant, rows=many_rows(1000))
        response = client.get("/ns/kauppa/r/L-1/pdf")
        assert response.status_code == 200
        assert response.content.startswith(b"%PDF")


class TestImport:
    def test_without_login_goes_to_login_and_back(
        self, client: httpx.Client, merchant: NewPartner
    ) -> None:
        link_receipt(client, merchant)
        client.get("/ns/kauppa/r/L-1?lang=sv")
        response = client.post(
            "/ns/kauppa/r/L-1?lang=sv",
            data={"action": "import", "csrf_token": client.cookies["kuitti_csrf"]},
        )
        assert response.status_code == 303
        location = urlsplit(response.headers["location"])
        assert location.path == "/login"
        assert parse_qs(location.query)["next"] == ["/ns/kauppa/r/L-1?lang=sv"]

    def test_a_logged_in_user_imports_and_their_apps_are_notified(
        self, client: httpx.Client, services: Services, merchant: NewPartner, user: User
    ) -> None:
        app = make_app(services, webhook_url="http://127.0.0.1:9/hook")
        connect(services, app, user, scope="receipt:read")
        created = link_receipt(client, merchant)
        login(client, "maija@example.com")
        page = client.get("/ns/kauppa/r/L-1")
        assert "Logged in as maija@example.com" in page.text
        response = client.post(
            "/ns/kauppa/r/L-1",
            data={"action": "import", "csrf_token": client.cookies["kuitti_csrf"]},
        )
        assert response.status_code == 303
        assert response.headers["location"] == "/ns/kauppa/r/L-1?imported=1"
        assert owners(services, created["receipt_id"]) == [user.id]
        back = client.get(response.headers["location"])
        assert "The receipt is now in your account." in back.text
        assert 'value="import"' not in back.text
        # Importing again changes nothing and notifies nobody twice.
        client.post(
            "/ns/kauppa/r/L-1",
            data={"action": "import", "csrf_token": client.cookies["kuitti_csrf"]},
        )
        notes = webhooks(services, "receipt_notification")
        assert [orjson.loads(n.payload)["receipt_id"] for n in notes] == [created["receipt_id"]]

    def test_import_needs_the_csrf_token(
        self, client: httpx.Client, services: Services, merchant: NewPartner, user: User
    ) -> None:
        created = link_receipt(client, merchant)
        login(client, "maija@example.com")
        response = client.post("/ns/kauppa/r/L-1", data={"action": "import"})
        assert response.status_code == 403
        assert owners(services, created["receipt_id"]) == []

    def test_import_by_private_link(
        self, client: httpx.Client, services: Services, merchant: NewPartner, user: User
    ) -> None:
        created = link_receipt(client, merchant)
        login(client, "maija@example.com")
        path = path_of(created["receipt_web_url"])
        client.get(path)
        response = client.post(
            path, data={"action": "import", "csrf_token": client.cookies["kuitti_csrf"]}
        )
        assert response.status_code == 303
        assert owners(services, created["receipt_id"]) == [user.id]
