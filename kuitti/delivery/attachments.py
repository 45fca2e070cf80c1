"""Files attached to an outgoing e-mail: the receipt's PDF (the ``service_pdf`` rendering),
built at send time so the request that queued the mail stays fast."""

from __future__ import annotations

from sqlalchemy.orm import Session

from kuitti.deps import Services
from kuitti.models import MailMessage, Partner, Receipt
from kuitti.receipts.formats import DataFormat, render


def receipt_pdf_filename(receipt: Receipt) -> str:
    """``receipt-<merchant>-<date>.pdf`` in safe ASCII."""
    safe = "".join(c if c.isascii() and c.isalnum() else "-" for c in receipt.merchant_name)
    merchant = "-".join(part for part in safe.split("-") if part)[:40] or "receipt"
    return f"receipt-{merchant}-{receipt.receipt_time.date().isoformat()}.pdf"


def attachments_for(
    services: Services, session: Session, message: MailMessage
) -> list[tuple[str, bytes]]:
    """(filename, content) pairs for the message; the receipt PDF when it asks for one."""
    if message.receipt_pdf_id is None:
        return []
    receipt = session.get(Receipt, message.receipt_pdf_id)
    if receipt is None:
        return []
    poster = session.get(Partner, receipt.partner_id)
    assert poster is not None
    pdf = render(receipt, poster, DataFormat.SERVICE_PDF)
    return [(receipt_pdf_filename(receipt), pdf.content)]
