"""One partner's whole day, across every domain, through the public interfaces only.

A bank app connects a user with OAuth 2.0 (consent with a message and partner metadata), a
merchant posts a receipt with an EMAIL token for that user, the bank gets a signed
``receipt_notification`` and fetches the receipt in every format with the user's token; the user
then removes the connection on the membership page, the bank is told, and the token stops
working on the next request.
"""

from __future__ import annotations

import io
import re
from urllib.parse import parse_qs, urlsplit

import httpx
import orjson
import pypdf
from standardwebhooks.webhooks import Webhook

from kuitti.models import PartnerRole
from kuitti.services import Services
from tests.conftest import LiveServer
from tests.factories import auth, make_partner, make_user, receipt_doc, token_body
from tests.oauth.flow import (
    REDIRECT_URI,
    auth_params,
    code_from,
    consent,
    csrf_of,
    exchange,
    log_in,
    state_of,
)
from tests.webhooks.receivers import Receiver
from tests.webhooks.support import deliver


def test_connect_receive_fetch_and_remove(live_server: LiveServer, services: Services) -> None:
    with Receiver() as bank_hooks, httpx.Client(base_url=live_server.url, timeout=30) as browser:
        bank = make_partner(
            services,
            PartnerRole.APP,
            name="Pankki App",
            redirect_uris=[REDIRECT_URI],
            webhook_url=bank_hooks.url,
        )
        merchant = make_partner(
            services, name="Kauppa Oy", iban="FI2112345600000785", bic="NDEAFIHH"
        )
        user = make_user(services, "maija@example.com")

        # 1. The user connects the bank app; the state carries a message and metadata.
        log_in(browser, user.email)
        state = state_of("Tuo kuitit pankkiin", customer="c-42")
        code, query = code_from(consent(browser, auth_params(bank, state=state)))
        assert query["state"] == [state]
        answer = exchange(browser, bank, code)
        assert answer.status_code == 200, answer.text
        token = answer.json()["access_token"]

        # 2. The merchant's till posts a receipt for the user's e-mail address.
        posted = browser.post(
            "/api/v1/receipts/",
            json=token_body(receipt_doc(), {"type": "EMAIL", "value": "Maija@Example.com"}),
            headers=auth(merchant.api_key),
        )
        assert posted.status_code == 200, posted.text
        assert posted.json()["tokens"] == [{"type": "EMAIL", "status": "delivered"}]
        receipt_id = posted.json()["receipt_id"]

        # 3. The bank is notified, signed as Standard Webhooks says, with its metadata.
        assert deliver(services) >= 1
        (call,) = bank_hooks.wait_for(1)
        assert bank.webhook_key is not None
        assert call.headers["authorization"] == f"Token {bank.webhook_key}"
        Webhook(bank.webhook_key).verify(call.body, call.headers)
        notification = orjson.loads(call.body)
        service_id = notification["service_id"]
        assert notification == {
            "notification_type": "receipt_notification",
            "service_id": service_id,
            "receipt_id": receipt_id,
            "partner_metadata": {"customer": "c-42"},
        }

        # 4. The bank fetches the receipt in every format with the user's token.
        user_headers = {"SERVICE_APIKEY": bank.api_key, "Authorization": f"Bearer {token}"}
        base = f"/api/v1/receipts/{receipt_id}"
        assert browser.get(f"{base}/service_json/", headers=user_headers).json() == receipt_doc()
        pdf = browser.get(f"{base}/service_pdf/", headers=user_headers)
        assert pdf.headers["content-type"] == "application/pdf"
        text = pypdf.PdfReader(io.BytesIO(pdf.content)).pages[0].extract_text()
        assert "Kauppa Oy" in text
        xml = browser.get(f"{base}/finvoice_xml/", headers=user_headers)
        assert xml.status_code == 200
        assert b"<Finvoice" in xml.content
        listed = browser.get("/api/v1/receipts/", headers=user_headers).json()
        assert [r["receipt_id"] for r in listed["receipts"]] == [receipt_id]

        # 5. The user removes the connection on the membership page.
        page = browser.get(
            "/membership", params={"service_id": service_id, "redirect_uri": REDIRECT_URI}
        )
        assert page.status_code == 200, page.text
        assert "Pankki App" in page.text
        hidden = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', page.text))
        hidden["action"] = "remove"
        hidden["csrf_token"] = csrf_of(page)
        removed = browser.post("/membership", data=hidden)
        assert removed.status_code == 303, removed.text
        back = parse_qs(urlsplit(removed.headers["location"]).query)
        assert back == {"status": ["removed"], "service_id": [service_id]}

        # 6. The bank hears of it, and the token stops working on the next request.
        deliver(services)
        revoke = orjson.loads(bank_hooks.wait_for(2)[1].body)
        assert revoke == {
            "notification_type": "oauth_authorization_revoke",
            "service_id": service_id,
            "partner_metadata": {"customer": "c-42"},
        }
        assert browser.get(f"{base}/service_json/", headers=user_headers).status_code == 401
