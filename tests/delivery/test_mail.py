"""The receipt e-mail, received by a real SMTP server (aiosmtpd) and parsed back."""

from __future__ import annotations

import asyncio
import dataclasses
import email
import io
import threading
from collections.abc import Iterator
from email.message import EmailMessage
from email.policy import default as default_policy
from typing import Any

import httpx
import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope, Session
from pypdf import PdfReader

from kuitti.clock import FrozenClock
from kuitti.delivery.mail import send_due_mail
from kuitti.models import User
from kuitti.partners.service import NewPartner
from kuitti.services import Services
from kuitti.worker import run_worker
from tests.conftest import free_port
from tests.delivery.support import mail_rows, post_receipt
from tests.factories import product_row, receipt_doc, token_body


class Inbox:
    """An aiosmtpd handler that keeps every message it receives."""

    def __init__(self) -> None:
        self.messages: list[EmailMessage] = []
        self.recipients: list[list[str]] = []
        self.received = threading.Event()

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        content = envelope.original_content or b""
        parsed = email.message_from_bytes(content, policy=default_policy)
        assert isinstance(parsed, EmailMessage)
        self.messages.append(parsed)
        self.recipients.append(list(envelope.rcpt_tos))
        self.received.set()
        return "250 Message accepted"


class SmtpServer:
    def __init__(self, port: int) -> None:
        self.inbox = Inbox()
        self.port = port
        self.controller = Controller(self.inbox, hostname="127.0.0.1", port=port)

    def __enter__(self) -> SmtpServer:
        self.controller.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.controller.stop()


@pytest.fixture
def smtp_port() -> int:
    return free_port()


@pytest.fixture
def smtp(smtp_port: int) -> Iterator[SmtpServer]:
    with SmtpServer(smtp_port) as server:
        yield server


def with_smtp(services: Services, port: int) -> Services:
    settings = services.settings.model_copy(update={"smtp_url": f"smtp://127.0.0.1:{port}"})
    return dataclasses.replace(services, settings=settings)


def parts(message: EmailMessage) -> tuple[str, str, list[tuple[str, bytes]]]:
    text = message.get_body(preferencelist=("plain",))
    html = message.get_body(preferencelist=("html",))
    assert text is not None
    assert html is not None
    files: list[tuple[str, bytes]] = []
    for part in message.iter_attachments():
        assert isinstance(part, EmailMessage)
        payload = part.get_payload(decode=True)
        assert isinstance(payload, bytes)
        files.append((part.get_filename() or "", payload))
    return str(text.get_content()), str(html.get_content()), files


def pdf_text(content: bytes) -> str:
    return "\n".join(page.extract_text() for page in PdfReader(io.BytesIO(content)).pages)


class TestReceiptEmail:
    def test_is_multipart_with_link_and_pdf(
        self,
        client: httpx.Client,
        services: Services,
        merchant: NewPartner,
        user: User,
        smtp: SmtpServer,
    ) -> None:
        body = token_body(
            receipt_doc(),
            {"type": "RECEIPT_ID", "value": "MAIL-1", "namespace": "kauppa"},
            {"type": "EMAIL", "value": "Maija@Example.com"},
        )
        response = post_receipt(client, merchant, body)
        assert response.status_code == 200
        assert send_due_mail(with_smtp(services, smtp.port)) == 1
        [message] = smtp.inbox.messages
        assert smtp.inbox.recipients == [["Maija@example.com"]]
        assert message["Subject"] == "Kuittisi: Kauppa Oy"  # a Finnish merchant writes Finnish
        assert message.is_multipart()
        text, html, files = parts(message)
        link = f"{services.settings.link_base}/ns/kauppa/r/MAIL-1"
        assert link in text
        assert f'href="{link}"' in html
        assert "8,49" in text  # 5,99 + 2,50 in Finnish style
        assert "8,49" in html
        [(filename, pdf)] = files
        assert filename.endswith(".pdf")
        assert pdf.startswith(b"%PDF")
        assert "Kauppa Oy" in pdf_text(pdf)
        [row] = mail_rows(services)
        assert row.status == "sent"

    def test_english_for_other_countries_and_html_is_escaped(
        self, client: httpx.Client, services: Services, merchant: NewPartner, smtp: SmtpServer
    ) -> None:
        hostile = "<script>alert('x')</script> & <b>Co</b>"
        doc = receipt_doc([product_row("<img src=x onerror=alert(1)>")])
        doc["merchant"]["name"] = hostile
        doc["merchant"]["branch"]["address"]["country"] = "DE"
        response = post_receipt(
            client, merchant, token_body(doc, {"type": "EMAIL", "value": "anna@example.org"})
        )
        assert response.status_code == 200
        send_due_mail(with_smtp(services, smtp.port))
        [message] = smtp.inbox.messages
        assert message["Subject"].startswith("Your receipt from <script>")
        text, html, _ = parts(message)
        assert hostile in text  # plain text is not HTML: shown as is
        assert "<script>" not in html
        assert "<img src=x" not in html
        assert "&lt;script&gt;" in html
        assert "&lt;img src=x onerror=alert(1)&gt;" in html

    def test_waits_while_the_smtp_server_is_down_and_is_retried(
        self,
        client: httpx.Client,
        services: Services,
        clock: FrozenClock,
        merchant: NewPartner,
        smtp_port: int,
    ) -> None:
        response = post_receipt(
            client,
            merchant,
            token_body(receipt_doc(), {"type": "EMAIL", "value": "anna@example.org"}),
        )
        assert response.status_code == 200  # the receipt is stored whatever SMTP does
        down = with_smtp(services, smtp_port)
        assert send_due_mail(down) == 0
        [row] = mail_rows(services)
        assert (row.status, row.attempt_count) == ("pending", 1)
        assert row.last_error
        assert send_due_mail(down) == 0  # not due again yet
        assert mail_rows(services)[0].attempt_count == 1
        wait = (row.next_attempt_at - services.clock.now()).total_seconds()
        first = services.settings.webhook_retry_schedule[0]
        assert first * 0.9 <= wait <= first * 1.1  # the schedule's first delay, ±10 % jitter
        clock.set(row.next_attempt_at)
        with SmtpServer(smtp_port) as server:
            assert send_due_mail(down) == 1
        assert len(server.inbox.messages) == 1
        [row] = mail_rows(services)
        assert (row.status, row.attempt_count, row.last_error) == ("sent", 2, None)
        page = client.get(response.json()["receipt_web_url"])
        assert page.status_code == 200

    def test_without_smtp_mail_is_written_as_eml(
        self, client: httpx.Client, services: Services, merchant: NewPartner
    ) -> None:
        assert services.settings.smtp_url is None
        post_receipt(
            client,
            merchant,
            token_body(receipt_doc(), {"type": "EMAIL", "value": "anna@example.org"}),
        )
        assert send_due_mail(services) == 1
        [row] = mail_rows(services)
        path = services.settings.mail_dir / f"{row.id}.eml"
        message: Any = email.message_from_bytes(path.read_bytes(), policy=default_policy)
        assert message["To"] == "anna@example.org"
        _, _, files = parts(message)
        assert [name.endswith(".pdf") for name, _ in files] == [True]


class TestThroughTheWorker:
    def test_the_delivery_worker_sends_queued_mail(
        self, client: httpx.Client, services: Services, merchant: NewPartner, smtp: SmtpServer
    ) -> None:
        post_receipt(
            client,
            merchant,
            token_body(receipt_doc(), {"type": "EMAIL", "value": "anna@example.org"}),
        )
        loop = asyncio.new_event_loop()
        stop = asyncio.Event()

        async def work() -> None:
            await run_worker(with_smtp(services, smtp.port), stop, settle=False)

        worker = threading.Thread(target=loop.run_until_complete, args=(work(),))
        worker.start()
        try:
            assert smtp.inbox.received.wait(timeout=30)
            # The worker records the outcome just after the server accepted the message.
            pause = threading.Event()
            for _ in range(400):
                if [row.status for row in mail_rows(services)] == ["sent"]:
                    break
                pause.wait(0.05)  # polling a row another thread writes, not timing a result
        finally:
            loop.call_soon_threadsafe(stop.set)
            worker.join(timeout=30)
            loop.close()
        assert smtp.inbox.recipients == [["anna@example.org"]]
        assert [row.status for row in mail_rows(services)] == ["sent"]
