"""The receipt PDF attached to an e-mail, sent through the real mail outbox (.eml fall-back)."""

from __future__ import annotations

import email
import email.policy
import io
import uuid

import httpx
from pypdf import PdfReader

from kuitti.delivery.attachments import attachments_for
from kuitti.delivery.mail import enqueue_mail, send_due_mail
from kuitti.models import MailMessage
from kuitti.services import Services
from tests.factories import receipt_doc
from tests.receipts.formats.support import post, poster


class TestReceiptPdfAttachment:
    def test_mail_carries_the_receipt_pdf(self, client: httpx.Client, services: Services) -> None:
        who = poster(services)
        receipt_id = post(client, who, receipt_doc(receiptNumber="R/77"))
        with services.db.session() as session:
            message = enqueue_mail(
                session,
                to="maija@example.com",
                subject="Kuitti",
                text_body="Kuittisi",
                receipt_pdf_id=uuid.UUID(receipt_id),
                now=services.clock.now(),
            )
            message_id = message.id
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

    def test_mail_without_receipt_has_no_attachment(self, services: Services) -> None:

        with services.db.session() as session:
            message = enqueue_mail(
                session, to="a@example.com", subject="s", text_body="t", now=services.clock.now()
            )
            row = session.get(MailMessage, message.id)
            assert row is not None
            assert attachments_for(services, session, row) == []
