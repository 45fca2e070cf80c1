"""Files attached to an outgoing e-mail: the receipt's PDF (``receipt-<number>.pdf``).

The PDF is rendered when the message is sent (not in the request that queued it), through the
same cached renderer as an API read, so a receipt e-mailed and then fetched is rendered once. Its
language follows the merchant's country (Finnish for Finland, Swedish for Sweden, otherwise
English), since an e-mail has no ``Accept-Language``.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from kuitti.i18n import Language
from kuitti.models import MailMessage, Receipt
from kuitti.receipts.formats.rendering import render_service_pdf
from kuitti.receipts.schema import Receipt as ReceiptDocument
from kuitti.receipts.view import parse_document
from kuitti.services import Services

_COUNTRY_LANGUAGE = {
    "fi": Language.FI,
    "fin": Language.FI,
    "finland": Language.FI,
    "suomi": Language.FI,
    "se": Language.SV,
    "swe": Language.SV,
    "sweden": Language.SV,
    "sverige": Language.SV,
    "ruotsi": Language.SV,
    "ax": Language.SV,  # Åland is Swedish-speaking
    "ala": Language.SV,
    "åland": Language.SV,
}


def language_for_country(country: str | None) -> Language:
    return _COUNTRY_LANGUAGE.get((country or "").strip().casefold(), Language.EN)


def mail_language(document: ReceiptDocument) -> Language:
    """The language a receipt is e-mailed in, message and PDF alike: from the merchant's
    country."""
    branch = document.merchant.branch
    return language_for_country(branch.address.country if branch else None)


def attachments_for(
    services: Services, session: Session, message: MailMessage
) -> list[tuple[str, bytes]]:
    """(filename, content) pairs for the message; the receipt PDF when it asks for one."""
    if message.receipt_pdf_id is None:
        return []
    receipt = session.get(Receipt, message.receipt_pdf_id)
    if receipt is None:
        return []
    rendered = render_service_pdf(
        session, receipt, locale=mail_language(parse_document(receipt.document)).value
    )
    return [(rendered.filename, rendered.content)]
