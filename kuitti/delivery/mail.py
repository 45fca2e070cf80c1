"""E-mail through the outbox: ``enqueue_mail`` (a message written whole) and
``enqueue_receipt_mail`` (a receipt e-mail, rendered when sent) write a row in the caller's
transaction; ``send_due_mail`` (run by the delivery worker, or called directly) sends what is due
over SMTP (``KUITTI_SMTP_URL``), or writes ``.eml`` files under ``var/mail/`` when no SMTP
server is set.
"""

from __future__ import annotations

import random
import smtplib
import ssl
import uuid
from datetime import datetime, timedelta
from email.message import EmailMessage
from email.utils import format_datetime, make_msgid
from urllib.parse import parse_qs, unquote, urlsplit

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from kuitti import outbox
from kuitti.config import Settings
from kuitti.delivery.emails import MailContent, receipt_email
from kuitti.ids import new_id
from kuitti.logs import log
from kuitti.metrics import MAIL_MESSAGES
from kuitti.models import MailMessage, Receipt
from kuitti.models.outbox import MailStatus
from kuitti.outbox import Lease
from kuitti.services import Services

MAIL_BATCH = 20
MAIL_LEASE_SECONDS = 120


def enqueue_mail(
    session: Session,
    *,
    to: str,
    subject: str,
    text_body: str,
    html_body: str | None = None,
    now: datetime,
) -> MailMessage:
    """Queue one e-mail, written whole, in the caller's transaction."""
    return _enqueue(session, to, now, subject=subject, text_body=text_body, html_body=html_body)


def enqueue_receipt_mail(
    session: Session, *, to: str, receipt_id: uuid.UUID, link: str, sandbox: bool, now: datetime
) -> MailMessage:
    """Queue the receipt e-mail of ``receipt_id`` carrying ``link``; the sender renders it.
    ``sandbox``: a test partner's receipt, written as an ``.eml`` file however
    ``KUITTI_SMTP_URL`` is set."""
    return _enqueue(session, to, now, receipt_id=receipt_id, receipt_link=link, sandbox=sandbox)


def _enqueue(session: Session, to: str, now: datetime, **what: object) -> MailMessage:
    message = MailMessage(
        id=new_id(),
        to_address=to,
        status=MailStatus.PENDING,
        attempt_count=0,
        next_attempt_at=now,
        created_at=now,
        **what,
    )
    session.add(message)
    return message


def content_of(session: Session, row: MailMessage) -> MailContent:
    """What ``row`` says: as written, or the receipt e-mail rendered now."""
    if row.receipt_id is None:
        assert row.subject is not None
        assert row.text_body is not None
        return MailContent(row.subject, row.text_body, row.html_body)
    receipt = session.get(Receipt, row.receipt_id)
    assert receipt is not None  # a receipt outlives its mail
    assert row.receipt_link is not None
    return receipt_email(session, receipt, link=row.receipt_link)


def build_message(settings: Settings, row: MailMessage, content: MailContent) -> EmailMessage:
    message = EmailMessage()
    message["From"] = settings.mail_from
    message["To"] = row.to_address
    message["Subject"] = content.subject
    message["Date"] = format_datetime(row.created_at)
    message["Message-ID"] = make_msgid(idstring=row.id.hex, domain="kuitti.invalid")
    message.set_content(content.text_body)
    if content.html_body:
        message.add_alternative(content.html_body, subtype="html")
    for filename, data in content.attachments:
        maintype, _, subtype = _media_type(filename).partition("/")
        message.add_attachment(data, maintype=maintype, subtype=subtype, filename=filename)
    return message


def _media_type(filename: str) -> str:
    return "application/pdf" if filename.endswith(".pdf") else "application/octet-stream"


def transmit(
    settings: Settings, message: EmailMessage, message_id: uuid.UUID, *, to_file: bool = False
) -> None:
    """Hand one message to the SMTP server, or write it as an .eml file (without a server, or
    when ``to_file``: a sandbox receipt's e-mail never reaches a mailbox)."""
    if to_file or not settings.smtp_url:
        settings.mail_dir.mkdir(parents=True, exist_ok=True)
        (settings.mail_dir / f"{message_id}.eml").write_bytes(bytes(message))
        return
    url = urlsplit(settings.smtp_url)
    options = parse_qs(url.query)
    host = url.hostname or "localhost"
    if url.scheme == "smtps":
        with smtplib.SMTP_SSL(
            host, url.port or 465, timeout=30, context=ssl.create_default_context()
        ) as smtp:
            _login_and_send(smtp, url.username, url.password, message)
        return
    with smtplib.SMTP(host, url.port or 25, timeout=30) as smtp:
        if options.get("starttls", ["false"])[0].lower() == "true":
            smtp.starttls(context=ssl.create_default_context())
        _login_and_send(smtp, url.username, url.password, message)


def _login_and_send(
    smtp: smtplib.SMTP, user: str | None, password: str | None, message: EmailMessage
) -> None:
    if user:
        smtp.login(unquote(user), unquote(password or ""))
    smtp.send_message(message)


def send_due_mail(services: Services, *, rng: random.Random | None = None) -> int:
    """Send every message that is due; returns how many were sent. Failures are retried on the
    same schedule as webhooks (``KUITTI_WEBHOOK_RETRY_SCHEDULE``, ±10 % jitter) and marked
    failed after the last delay."""
    rng = rng or random.Random()  # jitter, not a secret
    sent = 0
    while True:
        now = services.clock.now()
        lease = Lease.new(now, MAIL_LEASE_SECONDS)
        with services.db.session() as session:
            picked = (
                select(MailMessage.id)
                .where(outbox.due(MailMessage, now))
                .order_by(MailMessage.next_attempt_at)
                .limit(MAIL_BATCH)
            )
            claimed = session.execute(
                outbox.take(MailMessage, picked, services.db.dialect).returning(
                    MailMessage.id, MailMessage.attempt_count
                ),
                lease.values,
            ).all()
        if not claimed:
            return sent
        for message_id, attempts in claimed:
            sent += _send_one(services, message_id, attempts, lease, rng)


def _send_one(
    services: Services,
    message_id: uuid.UUID,
    attempts: int,
    lease: Lease,
    rng: random.Random,
) -> int:
    settings = services.settings
    error: str | None = None
    with services.db.session(write=False) as session:
        row = session.get(MailMessage, message_id)
        assert row is not None
        session.expunge(row)
        try:
            content = content_of(session, row)
        except Exception as exc:  # a rendering bug must not stop the worker; retried later
            log.exception("mail rendering failed", message_id=str(message_id))
            error = f"rendering: {type(exc).__name__}: {exc}"[:1000]
    if error is None:
        try:
            transmit(settings, build_message(settings, row, content), row.id, to_file=row.sandbox)
        except (OSError, smtplib.SMTPException) as exc:
            error = f"{type(exc).__name__}: {exc}"[:1000]
    now = services.clock.now()
    made = attempts + 1
    values: dict[str, object] = {"attempt_count": made, "last_error": error, **outbox.RELEASED}
    if error is None:
        values |= {"status": MailStatus.SENT, "sent_at": now}
    elif outbox.gives_up(settings, made):
        values |= {"status": MailStatus.FAILED}
    else:
        delay = outbox.retry_delay_seconds(settings, made, rng)
        values |= {"next_attempt_at": now + timedelta(seconds=delay)}
    with services.db.session() as session:
        # Only while the lease is still ours: a worker that took over after it ran out owns it.
        session.execute(
            update(MailMessage)
            .where(outbox.held_by(MailMessage, message_id, lease.token))
            .values(values)
        )
    outcome = "sent" if error is None else values.get("status", "retried")
    MAIL_MESSAGES.labels(str(outcome)).inc()
    if error is not None:
        log.warning("mail not sent", message_id=str(message_id), error=error)
    return 1 if error is None else 0
