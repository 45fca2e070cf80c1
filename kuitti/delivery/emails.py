"""The receipt e-mail of an EMAIL token: a text and an HTML part with the receipt link, and the
receipt's PDF attached.

Ingest only queues the message (``mail.enqueue_receipt_mail``: the receipt, the address, the
link); it is rendered here when the mail worker sends it, from the stored receipt, so a post
renders nothing and a crash between commit and send loses nothing.

The language follows the merchant's country (Finnish for FI, Swedish for SE and AX, otherwise
English), message and PDF alike: an e-mail has no ``Accept-Language`` to go by, and the link
page itself lets the reader switch.
"""

from __future__ import annotations

from dataclasses import dataclass

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from sqlalchemy.orm import Session

from kuitti.i18n import Language
from kuitti.models import Receipt
from kuitti.paths import TEMPLATES_DIR
from kuitti.receipts.formats.rendering import render_service_pdf
from kuitti.receipts.schema import Receipt as ReceiptDocument
from kuitti.receipts.view import build_view, parse_document

MAX_ROWS_IN_MAIL = 30

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


@dataclass(frozen=True)
class MailContent:
    """What a message says: its subject, its parts and the files attached (name, bytes)."""

    subject: str
    text_body: str
    html_body: str | None = None
    attachments: tuple[tuple[str, bytes], ...] = ()


def language_for_country(country: str | None) -> Language:
    return _COUNTRY_LANGUAGE.get((country or "").strip().casefold(), Language.EN)


def mail_language(document: ReceiptDocument) -> Language:
    """The language a receipt is e-mailed in, message and PDF alike: from the merchant's
    country."""
    branch = document.merchant.branch
    return language_for_country(branch.address.country if branch else None)


def receipt_email(session: Session, receipt: Receipt, *, link: str) -> MailContent:
    """The receipt e-mail of ``receipt``, carrying ``link``, its PDF attached."""
    document = parse_document(receipt.document)
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
    pdf = render_service_pdf(session, receipt, locale=locale)
    return MailContent(
        subject=subject,
        text_body=_env.get_template("email/receipt.txt").render(context),
        html_body=_env.get_template("email/receipt.html").render(context),
        attachments=((pdf.filename, pdf.content),),
    )
