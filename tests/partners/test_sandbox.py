"""Sandbox partners (docs/sandbox.md): ``kt_test_`` keys, receipts that are stored and readable
but never reach a person (e-mail, USER tokens, card-linking, webhooks, the pilot bank, the link
page, the dry run), a TEST mark, a clean-up after the retention time, and 404 across the line.

Each "never" is checked beside a production control that does reach the person, so a test that
passes is one whose channel works."""

from __future__ import annotations

import email
import io
import uuid
from datetime import timedelta
from email.message import EmailMessage
from email.policy import default as default_policy
from typing import Any

import httpx
import orjson
import pytest
from pypdf import PdfReader
from sqlalchemy import func, select

from kuitti.cards.settler import settle_due_matches
from kuitti.clock import FrozenClock
from kuitti.config import Settings
from kuitti.db import Base
from kuitti.delivery.mail import send_due_mail
from kuitti.models import (
    Card,
    MailMessage,
    Partner,
    PartnerRole,
    Receipt,
    User,
    WebhookDelivery,
)
from kuitti.partners.service import NewPartner
from kuitti.receipts.sandbox import purge_sandbox_receipts
from kuitti.services import Services
from tests.cards.support import HOOK, MID, PAID_AT, PAN, iso
from tests.delivery.support import connect, enroll_card, make_app, owners
from tests.delivery.test_mail import SmtpServer, smtp, smtp_port, with_smtp
from tests.factories import auth, card_payment, make_partner, make_user, receipt_doc, token_body
from tests.receipts.formats.support import BIC, IBAN, assert_valid_finvoice
from tests.test_cli import run, run_json
from tests.webhooks.receivers import Receiver
from tests.webhooks.support import WorkerThread, deliver, wait_until

__all__ = ["smtp", "smtp_port"]  # the aiosmtpd fixtures, used here by name

RECEIPTS = "/api/v1/receipts/"


def sandbox_partner(services: Services, *roles: PartnerRole, **options: Any) -> NewPartner:
    return make_partner(services, *roles, sandbox=True, **options)


def post(client: httpx.Client, partner: NewPartner, body: Any) -> dict[str, Any]:
    response = client.post(RECEIPTS, json=body, headers=auth(partner.api_key))
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()
    return data


def read(client: httpx.Client, key: str, receipt_id: str, fmt: str = "service_json") -> int:
    return client.get(f"{RECEIPTS}{receipt_id}/{fmt}/", headers={"Authorization": key}).status_code


def count(services: Services, model: type[Base]) -> int:
    with services.db.session(write=False) as session:
        return session.scalar(select(func.count()).select_from(model)) or 0


def pdf_text(content: bytes) -> str:
    return "\n".join(page.extract_text() for page in PdfReader(io.BytesIO(content)).pages)


class TestKeys:
    def test_create_list_show_and_rotate(self, services: Services) -> None:
        data = run_json(
            services, "partner", "create", "--name", "Testikauppa", "--role", "merchant",
            "--sandbox",
        )  # fmt: skip
        assert data["api_key"].startswith("kt_test_")
        assert data["sandbox"] is True
        production = run_json(services, "partner", "create", "--name", "Kauppa", "--role", "app")
        assert production["api_key"].startswith("kt_")
        assert not production["api_key"].startswith("kt_test_")
        assert production["sandbox"] is False
        listed = run(services, "partner", "list")
        assert f"{data['partner_id']}  Testikauppa  merchant  (sandbox)" in listed.stdout
        assert f"{production['partner_id']}  Kauppa  app\n" in listed.stdout + "\n"
        shown = run_json(services, "partner", "show", data["partner_id"])
        assert shown["sandbox"] is True
        assert "sandbox: True" in run(services, "partner", "show", data["partner_id"]).stdout
        rotated = run_json(services, "partner", "rotate", data["partner_id"], "--secret", "api_key")
        assert rotated["api_key"].startswith("kt_test_")


class TestReading:
    def test_stored_and_readable_by_its_partner_only(
        self, client: httpx.Client, services: Services
    ) -> None:
        test_merchant = sandbox_partner(services, name="Testikauppa")
        merchant = make_partner(services)
        test_id = post(client, test_merchant, receipt_doc())["receipt_id"]
        real_id = post(client, merchant, receipt_doc())["receipt_id"]
        assert read(client, test_merchant.api_key, test_id) == 200
        assert read(client, merchant.api_key, real_id) == 200
        # Across the line: 404, as if the receipt did not exist.
        assert read(client, test_merchant.api_key, real_id) == 404
        assert read(client, merchant.api_key, test_id) == 404
        listed = client.get(RECEIPTS, headers={"Authorization": test_merchant.api_key}).json()
        assert [r["receipt_id"] for r in listed["receipts"]] == [test_id]

    def test_cards_across_the_line_are_404(self, client: httpx.Client, services: Services) -> None:
        issuer = make_partner(services, PartnerRole.CARD_ISSUER, name="Issuer")
        test_issuer = sandbox_partner(services, PartnerRole.CARD_ISSUER, name="Test Issuer")
        real_card = enroll_card(services, issuer, "card-1")
        test_card = enroll_card(services, test_issuer, "card-2")
        for key, card_id in ((test_issuer.api_key, real_card), (issuer.api_key, test_card)):
            response = client.delete(f"/api/v1/cards/{card_id}/", headers=auth(key))
            assert response.status_code == 404
            transaction = {
                "service_card_id": str(card_id),
                "transaction_type": "auth",
                "amount": 100,
                "currency": "EUR",
                "timestamp": iso(PAID_AT),
                "merchant_id": MID,
                "merchant_name": "Kauppa",
            }
            response = client.post(
                "/api/v1/card-transactions/", json=transaction, headers=auth(key)
            )
            assert response.status_code == 404

    def test_a_sandbox_app_never_reads_its_users_real_receipts(
        self, client: httpx.Client, services: Services
    ) -> None:
        """A sandbox app may connect a user (to try OAuth), but the user's receipts are real."""
        user = make_user(services)
        real_app = connect(services, make_app(services), user)
        test_app = connect(
            services, make_app(services, "Testisovellus", namespaces=["testi"], sandbox=True), user
        )
        merchant = make_partner(services, namespaces=["kauppa"])
        email_token = {"type": "EMAIL", "value": user.email}
        receipt_id = post(client, merchant, token_body(receipt_doc(), email_token))["receipt_id"]
        url = f"{RECEIPTS}{receipt_id}/service_json/"
        assert client.get(url, headers=real_app.app_headers()).status_code == 200
        assert client.get(url, headers=test_app.app_headers()).status_code == 404
        listed = client.get(RECEIPTS, headers=test_app.app_headers()).json()
        assert listed == {"receipts": [], "next_cursor": None}
        # Nor did the sandbox app hear of it: only the real app was notified.
        with services.db.session(write=False) as session:
            notified = set(
                session.scalars(
                    select(WebhookDelivery.partner_id).where(
                        WebhookDelivery.notification_type == "receipt_notification"
                    )
                )
            )
        assert test_app.app.partner.id not in notified


class TestTokens:
    def test_tokens_answer_sandbox_and_reach_nobody(
        self, client: httpx.Client, services: Services
    ) -> None:
        user = make_user(services)
        with Receiver() as hooks:
            app = make_app(services, webhook_url=hooks.url)
            connected = connect(services, app, user)
            issuer = make_partner(services, PartnerRole.CARD_ISSUER, name="Issuer")
            enroll_card(services, issuer, "card-1", user_id=user.id)
            tokens = [
                {"type": "RECEIPT_ID", "namespace": "testi", "value": "T-1"},
                {"type": "EMAIL", "value": user.email},
                {"type": "USER", "token": connected.access_token},
                {"type": "CARD", "id": "card-1", "value": PAN},
            ]
            test_merchant = sandbox_partner(services, namespaces=["testi"])
            answer = post(client, test_merchant, token_body(receipt_doc(), *tokens))
            assert answer["tokens"] == [
                {"type": "RECEIPT_ID", "status": "link_created"},
                {"type": "EMAIL", "status": "sandbox"},
                {"type": "USER", "status": "sandbox"},
                {"type": "CARD", "status": "sandbox"},
            ]
            assert owners(services, answer["receipt_id"]) == []
            assert read(client, issuer.api_key, answer["receipt_id"]) == 404
            # The control: the same tokens from a production merchant reach the user and the app.
            merchant = make_partner(services, namespaces=["kauppa"])
            real_tokens = [{**tokens[0], "namespace": "kauppa"}, *tokens[1:]]
            real = post(client, merchant, token_body(receipt_doc(), *real_tokens))
            assert {t["status"] for t in real["tokens"][1:]} == {"delivered"}
            assert owners(services, real["receipt_id"]) == [user.id]
            deliver(services)
            [received] = hooks.wait_for(1)
            assert orjson.loads(received.body)["receipt_id"] == real["receipt_id"]
        assert len(hooks.received) == 1

    def test_a_real_receipt_never_reaches_a_test_card(
        self, client: httpx.Client, services: Services
    ) -> None:
        test_issuer = sandbox_partner(services, PartnerRole.CARD_ISSUER, name="Test Issuer")
        enroll_card(services, test_issuer, "card-1")
        with services.db.session() as session:
            card = session.scalar(select(Card))
            assert card is not None
            card.sandbox = True  # as enrolment through the API makes it
        merchant = make_partner(services)
        token = {"type": "CARD", "id": "card-1", "value": PAN}
        answer = post(client, merchant, token_body(receipt_doc(), token))
        assert answer["tokens"] == [{"type": "CARD", "status": "unmatched"}]
        assert read(client, test_issuer.api_key, answer["receipt_id"]) == 404
        # A test receipt's token names the test card: its issuer may read that one.
        test_merchant = sandbox_partner(services, name="Testikauppa")
        test = post(client, test_merchant, token_body(receipt_doc(), token))
        assert read(client, test_issuer.api_key, test["receipt_id"]) == 200

    def test_email_is_written_to_a_file_even_with_smtp(
        self, client: httpx.Client, services: Services, smtp: SmtpServer
    ) -> None:
        test_merchant = sandbox_partner(services, namespaces=["testi"])
        merchant = make_partner(services, namespaces=["kauppa"])
        for partner in (test_merchant, merchant):
            post(
                client,
                partner,
                token_body(receipt_doc(), {"type": "EMAIL", "value": "anna@example.org"}),
            )
        mailing = with_smtp(services, smtp.port)
        assert send_due_mail(mailing) == 2
        # Only the production e-mail reached the SMTP server.
        assert smtp.inbox.recipients == [["anna@example.org"]]
        assert not smtp.inbox.messages[0]["Subject"].startswith("[TEST]")
        with services.db.session(write=False) as session:
            test_mail = session.scalar(select(MailMessage).where(MailMessage.sandbox.is_(True)))
            assert test_mail is not None
            assert test_mail.status == "sent"
        path = services.settings.mail_dir / f"{test_mail.id}.eml"
        message = email.message_from_bytes(path.read_bytes(), policy=default_policy)
        assert isinstance(message, EmailMessage)
        assert message["Subject"].startswith("[TEST] ")
        [pdf] = [part for part in message.iter_attachments() if isinstance(part, EmailMessage)]
        content = pdf.get_payload(decode=True)
        assert isinstance(content, bytes)
        assert "TEST – a sandbox receipt" in pdf_text(content)

    def test_the_dry_run_of_a_sandbox_partner_sends_nothing(
        self, client: httpx.Client, services: Services
    ) -> None:
        user = make_user(services)
        test_merchant = sandbox_partner(services, namespaces=["testi"])
        body = token_body(receipt_doc(), {"type": "EMAIL", "value": user.email})
        response = client.post(
            "/api/v1/receipts/validate", json=body, headers=auth(test_merchant.api_key)
        )
        assert response.json() == {"valid": True, "warnings": []}
        assert count(services, Receipt) == count(services, MailMessage) == 0


def card_receipt() -> dict[str, Any]:
    """A receipt paid with one card: MID, masked PAN and time as ``tests.cards.support``."""
    doc = receipt_doc()
    doc["payments"] = [card_payment(doc["totalPriceIncVAT"])]
    attributes = doc["payments"][0]["attributes"]
    assert (attributes["MID"], attributes["maskedPAN"]) == (MID, PAN)
    return doc


class TestCardLinking:
    def enroll(self, client: httpx.Client, issuer: NewPartner, card_id: str) -> str:
        body = {"partner_card_id": card_id, "masked_pan": PAN, "exp_date": "2028-12"}
        answer = client.post("/api/v1/cards/", json=body, headers=auth(issuer.api_key))
        assert answer.status_code == 200, answer.text
        service_card_id: str = answer.json()["service_card_id"]
        return service_card_id

    def transaction(self, client: httpx.Client, issuer: NewPartner, card_id: str) -> None:
        body = {
            "partner_card_id": card_id,
            "transaction_type": "auth",
            "amount": receipt_doc()["totalPriceIncVAT"],
            "currency": "EUR",
            "timestamp": iso(PAID_AT),
            "merchant_id": MID,
            "merchant_name": "Kauppa Kamppi",
        }
        answer = client.post("/api/v1/card-transactions/", json=body, headers=auth(issuer.api_key))
        assert answer.status_code == 200, answer.text

    def real_card_with_transaction(
        self,
        client: httpx.Client,
        services: Services,
        clock: FrozenClock,
        issuer: NewPartner,
        holder: User,
    ) -> None:
        """``card-1`` of ``issuer``, held by ``holder``, with its auth five minutes ago."""
        card_id = self.enroll(client, issuer, "card-1")
        with services.db.session() as session:
            card = session.get(Card, uuid.UUID(card_id))
            assert card is not None
            card.user_id = holder.id
        clock.set(PAID_AT + timedelta(minutes=5))
        self.transaction(client, issuer, "card-1")

    def test_test_cards_and_real_cards_never_meet(
        self, client: httpx.Client, services: Services, clock: FrozenClock
    ) -> None:
        """The same card number, merchant id, amount and time on both sides: each receipt
        matches the card of its own kind, and the real holder gets only the real receipt."""
        user = make_user(services)
        issuer = make_partner(services, PartnerRole.CARD_ISSUER, name="Issuer", webhook_url=HOOK)
        test_issuer = sandbox_partner(
            services, PartnerRole.CARD_ISSUER, name="Test Issuer", webhook_url=HOOK
        )
        self.real_card_with_transaction(client, services, clock, issuer, user)
        self.enroll(client, test_issuer, "card-1")
        self.transaction(client, test_issuer, "card-1")
        test_id = post(client, sandbox_partner(services, name="Testikauppa"), card_receipt())[
            "receipt_id"
        ]
        real_id = post(client, make_partner(services), card_receipt())["receipt_id"]
        clock.set(PAID_AT + timedelta(hours=2))
        settle_due_matches(services)
        assert owners(services, real_id) == [user.id]
        assert owners(services, test_id) == []
        # Each issuer reads the receipt that matched its card, never the other.
        assert read(client, test_issuer.api_key, test_id) == 200
        assert read(client, test_issuer.api_key, real_id) == 404
        assert read(client, issuer.api_key, real_id) == 200
        assert read(client, issuer.api_key, test_id) == 404
        with services.db.session(write=False) as session:
            notices = {
                (row.partner_id, orjson.loads(row.payload)["data"]["receipt_id"])
                for row in session.scalars(
                    select(WebhookDelivery).where(
                        WebhookDelivery.notification_type == "receipt_notification"
                    )
                )
            }
        assert notices == {
            (issuer.partner.id, real_id),
            (test_issuer.partner.id, test_id),
        }

    def test_a_test_receipt_never_holds_up_a_real_match(
        self, client: httpx.Client, services: Services, clock: FrozenClock
    ) -> None:
        """A test receipt with the very keys of a real purchase is no rival for it."""
        user = make_user(services)
        issuer = make_partner(services, PartnerRole.CARD_ISSUER, name="Issuer")
        self.real_card_with_transaction(client, services, clock, issuer, user)
        test_id = post(client, sandbox_partner(services, name="Testikauppa"), card_receipt())
        real_id = post(client, make_partner(services), card_receipt())["receipt_id"]
        clock.set(PAID_AT + timedelta(hours=2))
        settle_due_matches(services)
        assert owners(services, real_id) == [user.id]
        assert owners(services, test_id["receipt_id"]) == []

    def test_a_test_issuer_links_no_holder(self, client: httpx.Client, services: Services) -> None:
        user = make_user(services)
        test_app = make_app(services, "Testipankki", namespaces=["testipankki"], sandbox=True)
        with services.db.session() as session:
            partner = session.get(Partner, test_app.partner.id)
            assert partner is not None
            partner.roles = [*partner.roles, PartnerRole.CARD_ISSUER.value]
        connected = connect(services, test_app, user)
        body = {"partner_card_id": "c", "masked_pan": PAN, "exp_date": "2028-12"}
        answer = client.post(
            "/api/v1/cards/",
            json=body,
            headers={
                "SERVICE_APIKEY": test_app.api_key,
                "Authorization": f"Bearer {connected.access_token}",
            },
        )
        assert answer.status_code == 200, answer.text
        with services.db.session(write=False) as session:
            card = session.get(Card, uuid.UUID(answer.json()["service_card_id"]))
            assert card is not None
            assert card.sandbox is True
            assert card.user_id is None

    def test_the_pilot_bank_never_gets_a_test_receipt(
        self, client: httpx.Client, services: Services, clock: FrozenClock
    ) -> None:
        with Receiver() as bank_hooks:
            bank = make_partner(
                services, PartnerRole.BANK_PILOT, name="Pilot", webhook_url=bank_hooks.url
            )
            run(
                services, "card", "enroll", "--partner", str(bank.partner.id),
                "--partner-card-id", "pilot-1", "--masked-pan", PAN,
                "--exp-date", "2028-12-31T23:59:59Z", "--pilot",
            )  # fmt: skip
            clock.set(PAID_AT + timedelta(minutes=20))
            test_id = post(client, sandbox_partner(services, name="Testikauppa"), card_receipt())
            real_id = post(client, make_partner(services), card_receipt())["receipt_id"]
            settle_due_matches(services)
            deliver(services)
            [received] = bank_hooks.wait_for(1)
            payload = orjson.loads(received.body)
            assert payload["notification_type"] == "full_receipt_notification"
            assert payload["receipt_id"] == real_id
        assert len(bank_hooks.received) == 1
        assert test_id["receipt_id"] != real_id


class TestTheTestMark:
    def test_both_pdfs_and_the_finvoice(self, client: httpx.Client, services: Services) -> None:
        test_merchant = sandbox_partner(services, iban=IBAN, bic=BIC)
        merchant = make_partner(services, iban=IBAN, bic=BIC)
        test_id = post(client, test_merchant, receipt_doc())["receipt_id"]
        real_id = post(client, merchant, receipt_doc())["receipt_id"]
        for fmt in ("service_pdf", "finvoice_pdf"):
            for layout in ("a4", "roll") if fmt == "service_pdf" else ("a4",):
                marked = client.get(
                    f"{RECEIPTS}{test_id}/{fmt}/",
                    params={"layout": layout},
                    headers={"Authorization": test_merchant.api_key},
                )
                plain = client.get(
                    f"{RECEIPTS}{real_id}/{fmt}/",
                    params={"layout": layout},
                    headers={"Authorization": merchant.api_key},
                )
                assert "TEST – a sandbox receipt" in pdf_text(marked.content), (fmt, layout)
                assert "TEST" not in pdf_text(plain.content), (fmt, layout)
        xml = client.get(
            f"{RECEIPTS}{test_id}/finvoice_xml/", headers={"Authorization": test_merchant.api_key}
        )
        assert xml.status_code == 200
        assert_valid_finvoice(xml.content)

    def test_the_link_page_is_marked_and_cannot_be_imported(
        self, client: httpx.Client, services: Services
    ) -> None:
        test_merchant = sandbox_partner(services, namespaces=["testi"])
        token = {"type": "RECEIPT_ID", "namespace": "testi", "value": "T-1"}
        answer = post(client, test_merchant, token_body(receipt_doc(), token))
        page = client.get(answer["receipt_links"][0], params={"lang": "en"})
        assert page.status_code == 200
        assert '<p class="test-mark" role="note"><strong>TEST</strong> A test receipt' in page.text
        assert 'value="import"' not in page.text
        imported = client.post(answer["receipt_links"][0], data={"action": "import"})
        assert imported.status_code in {403, 404}
        assert owners(services, answer["receipt_id"]) == []
        merchant = make_partner(services, namespaces=["kauppa"])
        real = post(client, merchant, token_body(receipt_doc(), {**token, "namespace": "kauppa"}))
        real_page = client.get(real["receipt_links"][0], params={"lang": "en"})
        assert "test-mark" not in real_page.text
        assert 'value="import"' in real_page.text


class TestRetention:
    def test_deleted_after_the_retention_time(
        self, client: httpx.Client, services: Services, clock: FrozenClock
    ) -> None:
        test_issuer = sandbox_partner(services, PartnerRole.CARD_ISSUER, name="Test Issuer")
        TestCardLinking().enroll(client, test_issuer, "card-1")
        clock.set(PAID_AT + timedelta(minutes=5))
        TestCardLinking().transaction(client, test_issuer, "card-1")
        test_merchant = sandbox_partner(services, namespaces=["testi"])
        body = token_body(
            card_receipt(),
            {"type": "RECEIPT_ID", "namespace": "testi", "value": "T-1"},
            {"type": "EMAIL", "value": "anna@example.org"},
        )
        test_id = post(client, test_merchant, body)["receipt_id"]
        real_id = post(client, make_partner(services), card_receipt())["receipt_id"]
        clock.set(PAID_AT + timedelta(hours=2))
        settle_due_matches(services)
        assert read(client, test_issuer.api_key, test_id) == 200
        before = {t.name: n for t, n in _counts(services).items()}
        clock.set(PAID_AT + timedelta(days=7, minutes=4))
        assert purge_sandbox_receipts(services) == 0  # not yet seven days old
        clock.set(PAID_AT + timedelta(days=7, minutes=6))
        assert purge_sandbox_receipts(services) == 1
        assert read(client, test_merchant.api_key, test_id) == 404
        assert read(client, test_issuer.api_key, test_id) == 404
        after = {t.name: n for t, n in _counts(services).items()}
        gone = {name: before[name] - after[name] for name in before if before[name] != after[name]}
        assert gone == {
            "receipts": 1,
            "receipt_links": 1,
            "receipt_grants": 2,  # the poster's and the test issuer's (through its card)
            "card_payments": 1,
            "card_matches": 1,
            "mail_messages": 1,
        }
        with services.db.session(write=False) as session:
            assert session.get(Receipt, uuid.UUID(real_id)) is not None
        # The link is free again for the next test run.
        post(client, test_merchant, body)

    def test_a_return_and_its_original(
        self, client: httpx.Client, services: Services, clock: FrozenClock
    ) -> None:
        """The return names the purchase; the purchase, older, goes in an earlier batch."""
        test_merchant = sandbox_partner(services)
        original = post(client, test_merchant, receipt_doc())["receipt_id"]
        clock.set(clock.now() + timedelta(days=1))
        refund = receipt_doc(type="RETURN", payments=None, originalReceiptId=original)
        returned = post(client, test_merchant, refund)
        with services.db.session(write=False) as session:
            stored = session.get(Receipt, uuid.UUID(returned["receipt_id"]))
            assert stored is not None
            assert str(stored.original_receipt_id) == original
        clock.set(clock.now() + timedelta(days=7, minutes=-1))
        assert purge_sandbox_receipts(services) == 1  # the purchase only
        clock.set(clock.now() + timedelta(days=1))
        assert purge_sandbox_receipts(services) == 1
        assert count(services, Receipt) == 0

    def test_the_worker_deletes_them(
        self, client: httpx.Client, services: Services, clock: FrozenClock
    ) -> None:
        post(client, sandbox_partner(services), receipt_doc())
        real_id = post(client, make_partner(services), receipt_doc())["receipt_id"]
        clock.set(clock.now() + timedelta(days=8))
        with WorkerThread(services):
            wait_until(lambda: count(services, Receipt) == 1)
        with services.db.session(write=False) as session:
            assert session.get(Receipt, uuid.UUID(real_id)) is not None

    def test_the_command_and_the_setting(self, client: httpx.Client, services: Services) -> None:
        """The command runs on the system clock: receipts stamped by the tests' frozen clock
        (early 2026) are old by then, unless the retention is long."""
        post(client, sandbox_partner(services), receipt_doc())
        post(client, make_partner(services), receipt_doc())
        kept = run_json(
            services, "receipts", "purge-sandbox", KUITTI_SANDBOX_RETENTION_DAYS="36500"
        )
        assert kept == {"deleted": 0, "retention_days": 36500}
        assert run_json(services, "receipts", "purge-sandbox") == {
            "deleted": 1,
            "retention_days": 7,
        }
        assert count(services, Receipt) == 1


def _counts(services: Services) -> dict[Any, int]:
    with services.db.session(write=False) as session:
        return {
            table: session.scalar(select(func.count()).select_from(table)) or 0
            for table in Base.metadata.sorted_tables
        }


def test_the_retention_must_be_positive() -> None:
    with pytest.raises(ValueError, match="sandbox_retention_days"):
        Settings(sandbox_retention_days=0)
