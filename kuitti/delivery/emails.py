"""The receipt e-mail of an EMAIL token: a text and an HTML part with the receipt link, and the
receipt's PDF attached at send time (``MailMessage.receipt_pdf_id``).

The language follows the merchant's country (Finnish for FI, Swedish for SE and AX, otherwise
English; ``attachments.mail_language``, which the attached PDF follows too): an e-mail has no
``Accept-Language`` to go by, and the link page itself lets the reader switch.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from sqlalchemy.orm import Session

from kuitti.config import Settings
from kuitti.delivery.attachments import mail_language
from kuitti.delivery.mail import enqueue_mail
from kuitti.models import MailMessage, Receipt
from kuitti.paths import TEMPLATES_DIR
from kuitti.receipts.schema import Receipt as ReceiptDocument
from kuitti.receipts.view import build_view

MAX_ROWS_IN_MAIL = 30

_env = Environment(
    loader=FileSystemLoader(TEMPLATES_DIR),
    autoescape=select_autoescape(["html"]),
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)

_TEXTS: dict[str, dict[str, str]] = {
    "en": {
        "subject": "Your receipt from {merchant}",
        "intro": "Here is your receipt from {merchant}.",
        "view": "View the receipt",
        "pdf": "The receipt is attached as a PDF.",
        "total": "Total",
        "date": "Date",
        "number": "Receipt number",
        "more": "and {count} more rows",
        "footer": "You received this e-mail because the merchant sent your receipt to this "
        "address with kuitti. With a kuitti account you can keep your receipts in one place: "
        "open the link and choose “Import to my account”.",
    },
    "fi": {
        "subject": "Kuittisi: {merchant}",
        "intro": "Tässä kuittisi ostoksestasi: {merchant}.",
        "view": "Näytä kuitti",
        "pdf": "Kuitti on liitteenä PDF-tiedostona.",
        "total": "Yhteensä",
        "date": "Päivämäärä",
        "number": "Kuitin numero",
        "more": "ja {count} riviä lisää",
        "footer": "Sait tämän viestin, koska kauppias lähetti kuittisi tähän osoitteeseen "
        "kuitti-palvelulla. Kuitti-tilillä pidät kuitit tallessa yhdessä paikassa: avaa linkki "
        "ja valitse ”Tuo tililleni”.",
    },
    "sv": {
        "subject": "Ditt kvitto från {merchant}",
        "intro": "Här är ditt kvitto från {merchant}.",
        "view": "Visa kvittot",
        "pdf": "Kvittot finns bifogat som PDF.",
        "total": "Totalt",
        "date": "Datum",
        "number": "Kvittonummer",
        "more": "och {count} rader till",
        "footer": "Du fick det här meddelandet eftersom handlaren skickade ditt kvitto till "
        "den här adressen med kuitti. Med ett kuitti-konto har du alla kvitton på ett ställe: "
        "öppna länken och välj ”Importera till mitt konto”.",
    },
}


@dataclass(frozen=True)
class MailRow:
    name: str
    quantity: str
    amount: str


def enqueue_receipt_email(
    session: Session,
    settings: Settings,
    receipt: Receipt,
    document: ReceiptDocument,
    *,
    to: str,
    link: str,
    now: datetime,
) -> MailMessage:
    """Queue the receipt e-mail in the caller's transaction; the worker sends it."""
    locale = mail_language(document).value
    texts = _TEXTS[locale]
    merchant = document.merchant.name
    view = build_view(document, locale=locale)
    rows = [MailRow(r.name, r.quantity_with_unit, r.total) for r in view.rows[:MAX_ROWS_IN_MAIL]]
    context = {
        "lang": locale,
        "t": texts,
        "merchant": merchant,
        "branch": document.merchant.branch.name if document.merchant.branch else None,
        "intro": texts["intro"].format(merchant=merchant),
        "receipt_number": document.receiptNumber,
        "date": view.time_short,
        "total": view.totals.incl_vat,
        "rows": rows,
        "more": (
            texts["more"].format(count=len(document.products) - MAX_ROWS_IN_MAIL)
            if len(document.products) > MAX_ROWS_IN_MAIL
            else None
        ),
        "link": link,
    }
    # A subject is one line whatever the merchant's name holds.
    subject = " ".join(texts["subject"].format(merchant=merchant).split())[:400]
    if receipt.sandbox:
        subject = f"[TEST] {subject}"
    return enqueue_mail(
        session,
        to=to,
        subject=subject,
        text_body=_env.get_template("email/receipt.txt").render(context),
        html_body=_env.get_template("email/receipt.html").render(context),
        receipt_pdf_id=receipt.id,
        sandbox=receipt.sandbox,
        now=now,
    )
