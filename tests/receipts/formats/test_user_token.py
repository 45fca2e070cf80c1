"""Every format through the read endpoint for a partner application reading with a user's token
(SERVICE_APIKEY + Bearer), the second kind of caller."""

from __future__ import annotations

import uuid

import httpx

from kuitti.delivery.service import deliver_to_user
from kuitti.models import Receipt
from kuitti.services import Services
from tests.factories import make_user
from tests.oauth.flow import connect, make_app
from tests.receipts.formats.support import (
    LIST,
    assert_valid_finvoice,
    pdf_text,
    post,
    poster,
    rich_doc,
)


class TestConnectionReader:
    def test_all_formats_with_a_user_token(self, client: httpx.Client, services: Services) -> None:
        merchant = poster(services)
        receipt_id = post(client, merchant, rich_doc())
        app = make_app(services)
        user = make_user(services, "maija@example.com")
        token = connect(client, app, "maija@example.com")
        with services.db.session() as session:
            receipt = session.get(Receipt, uuid.UUID(receipt_id))
            assert receipt is not None
            deliver_to_user(session, receipt, user.id, via="test", now=services.clock.now())
        headers = {"SERVICE_APIKEY": app.api_key, "Authorization": f"Bearer {token}"}
        answers = {
            fmt: client.get(f"{LIST}{receipt_id}/{fmt}/", headers=headers)
            for fmt in ("service_json", "service_pdf", "finvoice_xml", "finvoice_pdf")
        }
        assert {fmt: a.status_code for fmt, a in answers.items()} == dict.fromkeys(answers, 200)
        assert answers["service_json"].json()["receiptNumber"] == "R-2026-0001"
        assert "Kahvi Presidentti 500 g" in pdf_text(answers["service_pdf"].content)
        assert_valid_finvoice(answers["finvoice_xml"].content)
        assert "KUITTI" in pdf_text(answers["finvoice_pdf"].content)
        # Another user's receipt stays invisible to this token.
        other_id = post(client, merchant, rich_doc())
        hidden = client.get(f"{LIST}{other_id}/service_pdf/", headers=headers)
        assert hidden.status_code == 404
