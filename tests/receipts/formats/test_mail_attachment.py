"""The receipt e-mail, rendered by the mail sender from the stored receipt, its PDF attached; sent
through the real mail outbox (.eml fall-back)."""

from __future__ import annotations

import email
import email.policy
import io
import uuid

import httpx
from pypdf import PdfReader
from sqlalchemy import update

from kuitti.delivery.mail import content_of, enqueue_mail, enqueue_receipt_mail, send_due_mail
from kuitti.models import MailMessage, Receipt
from kuitti.models.outbox import MailStatus
from kuitti.services import Services
from tests.factories import receipt_doc
from tests.receipts.formats.support import post, poster


def queue_receipt_mail(services: Services, receipt_id: str) -> uuid.UUID:
    with services.db.session() as session:
        message = enqueue_receipt_mail(
            session,
            to="maija@example.com",
            receipt_id=uuid.UUID(receipt_id),
            link="https://kuitti.example/r/abc",
            sandbox=False,
            now=services.clock.now(),
        )
        return message.id


class TestReceiptPdfAttachment:
    def test_mail_carries_the_receipt_pdf(self, client: httpx.Client, services: Services) -> None:
        who = poster(services)
        receipt_id = post(client, who, receipt_doc(receiptNumber="R/77"))
        message_id = queue_receipt_mail(services, receipt_id)
        assert services.settings.smtp_url is None
        assert send_due_mail(services) >= 1
        raw = (services.settings.mail_dir / f"{message_id}.eml").read_bytes()
        parsed = email.message_from_bytes(raw, policy=email.policy.default)
        [attachment] = list(parsed.iter_attachments())
        assert attachment.get_filename() == "receipt-R_77.pdf"
        assert attachment.get_content_type() == "application/pdf"
        reader = PdfReader(io.BytesIO(attachment.get_content()))
        text = reader.pages[0].extract_text()
        # The merchant is in Finland, so the e-mailed PDF is in Finnish.
        assert "Kuittinumero R/77" in text
        assert "Kauppa Oy" in text

    def test_a_message_written_whole_has_no_attachment(self, services: Services) -> None:
        with services.db.session() as session:
            message = enqueue_mail(
                session, to="a@example.com", subject="s", text_body="t", now=services.clock.now()
            )
            row = session.get(MailMessage, message.id)
            assert row is not None
            content = content_of(session, row)
        assert (content.subject, content.text_body, content.attachments) == ("s", "t", ())

    def test_a_receipt_that_fails_to_render_is_retried_not_lost(
        self, client: httpx.Client, services: Services
    ) -> None:
        receipt_id = post(client, poster(services), receipt_doc())
        message_id = queue_receipt_mail(services, receipt_id)
        with services.db.session() as session:  # a stored document the renderer cannot read
            session.execute(
                update(Receipt).where(Receipt.id == uuid.UUID(receipt_id)).values(document="{}")
            )
        assert send_due_mail(services) == 0
        with services.db.session(write=False) as session:
            row = session.get(MailMessage, message_id)
            assert row is not None
            assert (row.status, row.attempt_count) == (MailStatus.PENDING, 1)
            assert row.last_error is not None
            assert row.last_error.startswith("rendering: ValidationError")
        assert not (services.settings.mail_dir / f"{message_id}.eml").exists()
