"""The Python client package (``clients/python``, ``kuitti_client``) against the real service.

One partner flow through the client only: a merchant posts a receipt (a retry with the same
``Idempotency-Key`` answers the same receipt), an app connects a user with the OAuth code + PKCE
flow, receives the signed webhook on a real HTTP server and checks it with the client's
verifier, then reads the receipt for the user. The retry rule is shown on a real server in
front of the service that answers 503 with ``Retry-After`` before letting the post through.
The client's models are held to the service's own (answers and webhook bodies), and the
README's webhook handler is run as written.
"""

from __future__ import annotations

import asyncio
import base64
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import httpx
import pytest
from kuitti_client import (
    AppReceiptNotification,
    AsyncClient,
    CardAdded,
    CardReceiptNotification,
    Client,
    FullReceiptNotification,
    KuittiError,
    OAuthRevokeNotification,
    RetryPolicy,
    TransactionNotification,
    WebhookError,
    WebhookVerifier,
    code_from_callback,
    exchange_code,
    models,
    start_authorization,
)
from pydantic import BaseModel
from sqlalchemy import func, select

from kuitti.cards import routes as card_routes
from kuitti.delivery import routes as delivery_routes
from kuitti.models import PartnerRole, Receipt
from kuitti.oauth import routes as oauth_routes
from kuitti.receipts import answers
from kuitti.services import Services
from kuitti.webhooks.payloads import PAYLOAD_MODELS
from kuitti.webhooks.signing import webhook_headers
from tests.conftest import LiveServer, free_port
from tests.factories import make_partner, make_user, receipt_doc
from tests.oauth.flow import REDIRECT_URI, consent, log_in
from tests.webhooks.receivers import Receiver
from tests.webhooks.support import deliver


def stored_receipts(services: Services) -> int:
    with services.db.session(write=False) as session:
        return session.scalar(select(func.count()).select_from(Receipt)) or 0


def test_merchant_app_and_webhook_through_the_client(
    live_server: LiveServer, services: Services
) -> None:
    with Receiver() as app_hooks, httpx.Client(base_url=live_server.url, timeout=30) as browser:
        app = make_partner(
            services,
            PartnerRole.APP,
            name="Pankki App",
            redirect_uris=[REDIRECT_URI],
            webhook_url=app_hooks.url,
        )
        merchant = make_partner(services, name="Kauppa Oy")
        user = make_user(services, "maija@example.com")
        assert app.partner.client_id is not None
        assert app.webhook_key is not None

        # 1. The app connects the user: consent URL with state and S256 challenge, the
        #    user approves (the browser's form posts), the code is exchanged with the verifier.
        request = start_authorization(
            live_server.url,
            app.partner.client_id,
            REDIRECT_URI,
            ["receipt:read"],
            message="Tuo kuitit pankkiin",
            partner_metadata={"customer": "c-42"},
        )
        query = dict(parse_qsl(urlsplit(request.url).query))
        assert query["code_challenge_method"] == "S256"
        log_in(browser, user.email)
        back = consent(browser, query)
        assert back.status_code == 303, back.text
        code = code_from_callback(request, back.headers["location"])
        token = exchange_code(
            live_server.url, request, code, app.partner.client_id, app.client_secret
        )
        assert token.token_type == "Bearer"
        assert token.scope == "receipt:read"

        # 2. The merchant posts a receipt for the user's e-mail address; a retry with the
        #    same Idempotency-Key answers the same receipt and stores nothing new.
        with Client(live_server.url, merchant.api_key) as till:
            tokens = [{"type": "EMAIL", "value": "Maija@Example.com"}]
            posted = till.post_receipt(receipt_doc(), tokens=tokens, idempotency_key="till-1-0001")
            again = till.post_receipt(receipt_doc(), tokens=tokens, idempotency_key="till-1-0001")
        assert [(t.type, t.status) for t in posted.tokens] == [("EMAIL", "delivered")]
        assert again.receipt_id == posted.receipt_id
        assert stored_receipts(services) == 1

        # 3. The app's webhook server receives the notification; the client's verifier checks
        #    it and returns the typed body, with the metadata from the state.
        assert deliver(services) >= 1
        (call,) = app_hooks.wait_for(1)
        event = WebhookVerifier(app.webhook_key).verify(call.body, call.headers)
        assert isinstance(event, AppReceiptNotification)
        assert event.receipt_id == posted.receipt_id
        assert event.service_id == token.service_id
        assert event.partner_metadata == {"customer": "c-42"}
        tampered = call.body.replace(b"c-42", b"c-43")
        with pytest.raises(WebhookError, match="signature"):
            WebhookVerifier(app.webhook_key).verify(tampered, call.headers)

        # 4. The app reads the receipt for the user, in two formats and in the list.
        with Client(live_server.url, app.api_key, access_token=token.access_token) as reader:
            assert reader.get_receipt(event.receipt_id) == receipt_doc()
            assert reader.get_receipt(event.receipt_id, "service_pdf").startswith(b"%PDF")
            assert [r.receipt_id for r in reader.list_receipts()] == [posted.receipt_id]
            with pytest.raises(KuittiError) as refused:
                reader.get_receipt(event.receipt_id, "finvoice_xml")
        assert refused.value.status == 409
        assert refused.value.error == "finvoice_unavailable"
        assert refused.value.decription


def test_the_async_client_pages_through_every_receipt(
    live_server: LiveServer, services: Services
) -> None:
    merchant = make_partner(services, name="Kauppa Oy")

    async def main() -> tuple[list[str], list[str]]:
        async with AsyncClient(live_server.url, merchant.api_key) as till:
            posted = [(await till.post_receipt(receipt_doc())).receipt_id for _ in range(3)]
            listed = [r.receipt_id async for r in till.list_receipts(limit=2)]
        return posted, listed

    posted, listed = asyncio.run(main())
    assert sorted(listed) == sorted(posted)
    assert len(listed) == 3  # two pages of at most two


def test_a_card_issuer_through_the_client(live_server: LiveServer, services: Services) -> None:
    """Enrol a card, report its payment (twice: the second is a replay), remove the card; the
    same enrolment through the async client answers the same card."""
    issuer = make_partner(services, PartnerRole.CARD_ISSUER, name="Pankki Oyj")
    card = models.CardEnrolment(
        partner_card_id="card-1", masked_pan="415301******1234", exp_date="2028-12"
    )
    payment = {
        "partner_card_id": "card-1",
        "transaction_type": "auth",
        "amount": 849,
        "currency": "EUR",
        "timestamp": "2026-01-15T14:03:11+02:00",
        "merchant_id": "MID-000123",
        "merchant_name": "Kauppa Kamppi",
    }
    with Client(live_server.url, issuer.api_key) as bank:
        enrolled = bank.enroll_card(card)
        recorded = bank.report_card_transaction(payment)
        replayed = bank.report_card_transaction(models.CardTransaction.model_validate(payment))

        async def enrol_again() -> models.Card:
            async with AsyncClient(live_server.url, issuer.api_key) as async_bank:
                return await async_bank.enroll_card(card.model_dump(exclude_none=True))

        assert asyncio.run(enrol_again()) == enrolled
        removed = bank.delete_card(enrolled.service_card_id)
        with pytest.raises(KuittiError) as gone:
            bank.report_card_transaction({**payment, "amount": 1000})
    assert (enrolled.partner_card_id, enrolled.masked_pan, enrolled.pilot) == (
        "card-1",
        "415301******1234",
        False,
    )
    assert recorded.service_card_id == enrolled.service_card_id
    assert (recorded.replayed, replayed.replayed) == (False, True)
    assert replayed.transaction_id == recorded.transaction_id
    assert removed == models.CardRemoved(
        service_card_id=enrolled.service_card_id, partner_card_id="card-1", deleted=True
    )
    assert gone.value.status == 404


class _Busy(BaseHTTPRequestHandler):
    """Answers the first request 503 with Retry-After: 0, then forwards to the service."""

    protocol_version = "HTTP/1.1"
    server: _BusyServer

    def log_message(self, format: str, *args: object) -> None:
        return

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host",)}
        with self.server.lock:
            self.server.keys.append(self.headers["Idempotency-Key"])
            busy = len(self.server.keys) == 1
        if busy:
            status, content = 503, b'{"error": "unavailable", "decription": "busy"}'
            out = {"Retry-After": "0", "Content-Type": "application/json"}
        else:
            answer = httpx.post(self.server.upstream + self.path, content=body, headers=headers)
            status, content = answer.status_code, answer.content
            out = {"Content-Type": answer.headers["content-type"]}
        self.send_response(status)
        for name, value in {**out, "Content-Length": str(len(content))}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(content)


class _BusyServer(ThreadingHTTPServer):
    def __init__(self, upstream: str) -> None:
        super().__init__(("127.0.0.1", 0), _Busy)
        self.upstream = upstream
        self.keys: list[str] = []
        self.lock = threading.Lock()


@contextmanager
def busy_front(upstream: str) -> Iterator[_BusyServer]:
    server = _BusyServer(upstream)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_a_busy_answer_is_retried_with_the_same_key(
    live_server: LiveServer, services: Services
) -> None:
    merchant = make_partner(services, name="Kauppa Oy")
    waits: list[float] = []
    with busy_front(live_server.url) as front:
        url = f"http://127.0.0.1:{front.server_address[1]}"
        with Client(url, merchant.api_key, sleep=waits.append) as till:
            created = till.post_receipt(receipt_doc())
    assert waits == [0.0]  # what Retry-After asked
    first, second = front.keys
    assert first == second  # one key on every attempt: the receipt is stored once
    assert stored_receipts(services) == 1
    assert created.receipt_id


def test_a_busy_answer_is_an_error_once_the_attempts_are_spent(
    live_server: LiveServer, services: Services
) -> None:
    merchant = make_partner(services, name="Kauppa Oy")
    with busy_front(live_server.url) as front:
        url = f"http://127.0.0.1:{front.server_address[1]}"
        with (
            Client(url, merchant.api_key, retry=RetryPolicy(attempts=1)) as till,
            pytest.raises(KuittiError) as refused,
        ):
            till.post_receipt(receipt_doc())
    assert (refused.value.status, refused.value.error) == (503, "unavailable")
    assert refused.value.retry_after == 0
    assert stored_receipts(services) == 0


CLIENT_MODELS: dict[str, type[BaseModel]] = {
    "receipt_notification": AppReceiptNotification,
    "transaction_notification": TransactionNotification,
    "oauth_authorization_revoke": OAuthRevokeNotification,
    "card_added": CardAdded,
    "card_issuer_receipt_notification": CardReceiptNotification,
    "full_receipt_notification": FullReceiptNotification,
}


def assert_same_keys(service: type[BaseModel], client: type[BaseModel]) -> None:
    """The client's model has the service's keys; those it requires are the ones the service
    always sends (the rest it leaves out when empty); nested objects alike."""
    omitted: frozenset[str] = getattr(service, "OMITTED_WHEN_NONE", frozenset())
    assert set(client.model_fields) == set(service.model_fields), client
    always = {name for name in service.model_fields if name not in omitted}
    assert {n for n, f in client.model_fields.items() if f.is_required()} == always, client
    for name, field in service.model_fields.items():
        nested = field.annotation
        if isinstance(nested, type) and issubclass(nested, BaseModel):
            inner = client.model_fields[name].annotation
            assert isinstance(inner, type)
            assert issubclass(inner, BaseModel)
            assert_same_keys(nested, inner)


def test_the_client_has_a_model_for_every_webhook_body_the_service_sends() -> None:
    assert {str(model.WEBHOOK_NAME) for model in PAYLOAD_MODELS} == set(CLIENT_MODELS)
    for model in PAYLOAD_MODELS:
        assert_same_keys(model, CLIENT_MODELS[str(model.WEBHOOK_NAME)])


CARD_ADDED = (
    b'{"notification_type": "card_added", "partner_card_id": "card-1", "service_card_id": '
    b'"3f1c0d1e-8a3b-4c55-9d0e-1b2c3d4e5f60", "data": {"masked_pan": "415301******1234", '
    b'"exp_date": "2028-12-31T23:59:59Z"}}'
)


def test_the_verifier_refuses_what_kuitti_did_not_send_now() -> None:
    key = "whsec_" + base64.b64encode(b"k" * 32).decode()
    now = 1_768_478_591
    verifier = WebhookVerifier(key, now=lambda: now)
    signed = webhook_headers(key, "msg-1", now, CARD_ADDED, bare_authorization=True)

    event = verifier.verify(CARD_ADDED, signed)  # a card issuer's bare Authorization
    assert isinstance(event, CardAdded)
    assert event.data.name is None

    stale = webhook_headers(key, "msg-1", now - 301, CARD_ADDED, bare_authorization=True)
    other = "whsec_" + base64.b64encode(b"o" * 32).decode()
    forged = webhook_headers(other, "msg-1", now, CARD_ADDED, bare_authorization=True)
    for headers, reason in [
        (stale, "timestamp"),
        ({**signed, "Authorization": other}, "Authorization"),
        ({**forged, "Authorization": key}, "signature"),
        ({**signed, "webhook-id": "msg-2"}, "signature"),
    ]:
        with pytest.raises(WebhookError, match=reason):
            verifier.verify(CARD_ADDED, headers)


def readme_block(heading: str) -> str:
    """The first Python block under a heading of the client's README."""
    readme = (Path(__file__).parent.parent / "clients" / "python" / "README.md").read_text()
    section = readme.split(f"## {heading}\n", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_readme_webhook_handler_runs_as_written() -> None:
    key = "whsec_" + base64.b64encode(b"r" * 32).decode()
    body = (
        b'{"notification_type": "receipt_notification", "service_id": "0b7c4a52-9b7e-4d4c-8f4e-'
        b'6f1f3c1c2a10", "receipt_id": "5d0c9c0e-3f0e-4b9e-9d55-2b8b8f6d2f11"}'
    )
    headers = webhook_headers(key, "msg-1", int(time.time()), body, bare_authorization=False)
    namespace: dict[str, Any] = {"WEBHOOK_KEY": key}
    exec(readme_block("Checking webhooks"), namespace)  # noqa: S102 (our own README)
    assert namespace["handle"](body, headers) == 200
    assert namespace["handle"](body.replace(b"0b7c", b"0b7d"), headers) == 400


def test_the_client_answer_models_have_the_service_answer_keys() -> None:
    pairs: list[tuple[type[BaseModel], type[BaseModel]]] = [
        (answers.ReceiptCreated, models.ReceiptCreated),
        (answers.ReceiptSummary, models.ReceiptSummary),
        (answers.ReceiptList, models.ReceiptList),
        (answers.TokenResult, models.TokenResult),
        (oauth_routes.AccessToken, models.AccessToken),
        (oauth_routes.Revoked, models.Revoked),
        (delivery_routes.QrCode, models.QrCode),
        (card_routes.Card, models.Card),
        (card_routes.CardRemoved, models.CardRemoved),
        (card_routes.CardTransactionRecorded, models.CardTransactionRecorded),
    ]
    for service, client in pairs:
        required = {n for n, f in service.model_fields.items() if f.is_required()}
        assert required <= {n for n, f in client.model_fields.items() if f.is_required()}, client
        assert set(service.model_fields) <= set(client.model_fields), client


def test_a_lost_connection_is_retried_then_raised() -> None:
    waits: list[float] = []
    policy = RetryPolicy(attempts=3, backoff=0.5)
    with (
        Client(f"http://127.0.0.1:{free_port()}", "kt_x", retry=policy, sleep=waits.append) as c,
        pytest.raises(httpx.ConnectError),
    ):
        c.get_receipt("5d0c9c0e-3f0e-4b9e-9d55-2b8b8f6d2f11")
    assert waits == [0.5, 1.0]  # nothing listens: two waits that double, three attempts
