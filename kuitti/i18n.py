"""Interface languages (Finnish, Swedish, English) and the labels receipts are shown with.

One small catalogue shared by the receipt PDF, the Finvoice PDF and the receipt pages, so a label
reads the same everywhere. ``translate(key, locale)`` falls back to English, then to the key
itself, so a missing translation never breaks a page. Add new keys to all three languages.
"""

from __future__ import annotations

from enum import StrEnum


class Language(StrEnum):
    FI = "fi"
    SV = "sv"
    EN = "en"


DEFAULT_LANGUAGE = Language.EN
LANGUAGES: tuple[Language, ...] = tuple(Language)
LANGUAGE_NAMES = {Language.FI: "Suomi", Language.SV: "Svenska", Language.EN: "English"}

# key: (fi, sv, en)
_MESSAGES: dict[str, tuple[str, str, str]] = {
    # document
    "receipt": ("Kuitti", "Kvitto", "Receipt"),
    "receipt.PURCHASE": ("Kuitti", "Kvitto", "Receipt"),
    "receipt.RETURN": ("Palautuskuitti", "Returkvitto", "Refund receipt"),
    "receipt.PURCHASE_AND_RETURN": (
        "Osto- ja palautuskuitti",
        "Köp- och returkvitto",
        "Purchase and refund receipt",
    ),
    "receipt_number": ("Kuittinumero", "Kvittonummer", "Receipt number"),
    "date": ("Päivämäärä", "Datum", "Date"),
    "time": ("Aika", "Tid", "Time"),
    "business_id": ("Y-tunnus", "FO-nummer", "Business ID"),
    "branch": ("Toimipiste", "Verksamhetsställe", "Branch"),
    "pos": ("Kassa", "Kassa", "Till"),
    "phone": ("Puhelin", "Telefon", "Phone"),
    "email": ("Sähköposti", "E-post", "E-mail"),
    "website": ("Verkkosivu", "Webbplats", "Website"),
    "page": ("Sivu", "Sida", "Page"),
    "download_pdf": ("Lataa PDF", "Ladda ner PDF", "Download PDF"),
    # a return and its purchase ({number}: the other receipt's number, {date}: its time)
    "return_of": (
        "Palautus kuitista {number} ({date})",
        "Retur av kvitto {number} ({date})",
        "Return of receipt {number} ({date})",
    ),
    "returned_on": (
        "Palautettu {date} (kuitti {number})",
        "Returnerad {date} (kvitto {number})",
        "Returned on {date} (receipt {number})",
    ),
    # rows
    "products": ("Tuotteet", "Produkter", "Products"),
    "product": ("Tuote", "Produkt", "Product"),
    "quantity": ("Määrä", "Antal", "Quantity"),
    "unit_price": ("À-hinta", "À-pris", "Unit price"),
    "row_total": ("Yhteensä", "Summa", "Amount"),
    "vat_rate": ("ALV %", "Moms %", "VAT %"),
    "discount": ("Alennus", "Rabatt", "Discount"),
    "ean": ("EAN", "EAN", "EAN"),
    "product_id": ("Tuotenumero", "Artikelnummer", "Product no."),
    "category": ("Tuoteryhmä", "Varugrupp", "Category"),
    "tags": ("Tunnisteet", "Taggar", "Tags"),
    # VAT and totals
    "vat": ("ALV", "Moms", "VAT"),
    "vat_breakdown": ("Arvonlisäverot", "Momsspecifikation", "VAT breakdown"),
    "vat_code": ("Verokoodi", "Momskod", "VAT code"),
    "excl_vat": ("Veroton", "Exkl. moms", "Excl. VAT"),
    "incl_vat": ("Verollinen", "Inkl. moms", "Incl. VAT"),
    "vat_amount": ("Vero", "Moms", "VAT"),
    "total": ("Yhteensä", "Totalt", "Total"),
    "total_excl_vat": ("Veroton yhteensä", "Totalt exkl. moms", "Total excl. VAT"),
    "total_vat": ("ALV yhteensä", "Moms totalt", "Total VAT"),
    "total_incl_vat": ("Yhteensä (sis. ALV)", "Totalt inkl. moms", "Total incl. VAT"),
    # payments
    "payments": ("Maksut", "Betalningar", "Payments"),
    "payment.CARD": ("Korttimaksu", "Kortbetalning", "Card payment"),
    "payment.CASH": ("Käteinen", "Kontant", "Cash"),
    "payment.LOYALTY": ("Kanta-asiakaskortti", "Stamkundskort", "Loyalty card"),
    "payment.GIFT_CARD": ("Lahjakortti", "Presentkort", "Gift card"),
    "payment.MOBILEPAY": ("MobilePay", "MobilePay", "MobilePay"),
    "payment.ONLINE": ("Verkkomaksu", "Onlinebetalning", "Online payment"),
    "payment.OTHER": ("Muu maksu", "Annan betalning", "Other payment"),
    "card_number": ("Kortti", "Kort", "Card"),
    "card_network": ("Korttiverkko", "Kortnätverk", "Card network"),
    "authorization_code": ("Varmennus", "Auktorisering", "Authorisation"),
    "reference": ("Viite", "Referens", "Reference"),
    "terminal": ("Pääte", "Terminal", "Terminal"),
    "handed_amount": ("Annettu", "Mottaget", "Tendered"),
    "change": ("Takaisin", "Växel", "Change"),
    # attachments
    "attachments": ("Liitteet", "Bilagor", "Attachments"),
    "attachment.TICKET": ("Lippu", "Biljett", "Ticket"),
    "attachment.RETURN": ("Palautus", "Retur", "Return"),
    "attachment.VOUCHER": ("Etuseteli", "Värdekupong", "Voucher"),
    "valid_until": ("Voimassa", "Giltig till", "Valid until"),
    "code_not_encodable": (
        "Koodia ei voi esittää kuvana",
        "Koden kan inte visas som bild",
        "The code cannot be shown as an image",
    ),
    # journeys
    "journey": ("Matka", "Resa", "Journey"),
    "journey.TRAIN": ("Juna", "Tåg", "Train"),
    "journey.BUS": ("Bussi", "Buss", "Bus"),
    "journey.TAXI": ("Taksi", "Taxi", "Taxi"),
    "journey.FLIGHT": ("Lento", "Flyg", "Flight"),
    "journey.FERRY": ("Lautta", "Färja", "Ferry"),
    "departure": ("Lähtö", "Avgång", "Departure"),
    "arrival": ("Saapuminen", "Ankomst", "Arrival"),
    "distance": ("Matka", "Sträcka", "Distance"),
    "duration": ("Kesto", "Längd", "Duration"),
    "co2": ("CO₂-päästöt", "CO₂-utsläpp", "CO₂ emissions"),
    "vehicle": ("Ajoneuvo", "Fordon", "Vehicle"),
    "driver": ("Kuljettaja", "Förare", "Driver"),
    "pickup_arrived_at": ("Nouto paikalla", "Hämtning på plats", "Pickup arrived"),
    "minutes": ("min", "min", "min"),
    # custom attributes, free text
    "details": ("Lisätiedot", "Övrig information", "Details"),
    # verifications (OCMF)
    "verifications": ("Mittaustietojen varmennus", "Verifiering av mätdata", "Meter verification"),
    "verification.valid": ("Allekirjoitus kelvollinen", "Signaturen är giltig", "Signature valid"),
    "verification.invalid": (
        "Allekirjoitus virheellinen",
        "Signaturen är ogiltig",
        "Signature invalid",
    ),
    "verification.unverifiable": (
        "Ei voitu varmentaa",
        "Kunde inte verifieras",
        "Could not verify",
    ),
    "transaction": ("Tapahtuma", "Transaktion", "Transaction"),
    "meter": ("Mittari", "Mätare", "Meter"),
    "reading": ("Lukema", "Mätvärde", "Reading"),
    "reading.begin": ("Alku", "Start", "Begin"),
    "reading.end": ("Loppu", "Slut", "End"),
    "energy": ("Energia", "Energi", "Energy"),
    "public_key_note": (
        "Tarkistettu kuitin mukana tulleella julkisella avaimella.",
        "Kontrollerad med den publika nyckel som följer med kvittot.",
        "Checked with the public key carried by the receipt.",
    ),
    # Finvoice rendering
    "finvoice.seller": ("Myyjä", "Säljare", "Seller"),
    "finvoice.buyer": ("Ostaja", "Köpare", "Buyer"),
    "finvoice.invoice_details": ("Kuitin tiedot", "Kvittouppgifter", "Receipt details"),
    "finvoice.payment_status": ("Maksun tila", "Betalningsstatus", "Payment status"),
    "finvoice.paid": ("Maksettu", "Betald", "Paid"),
    "finvoice.payment_method": ("Maksutapa", "Betalningssätt", "Payment method"),
    "finvoice.paid_amount": ("Maksettu summa", "Betalt belopp", "Paid amount"),
    "finvoice.payable": ("Maksettavaa", "Att betala", "Payable"),
    "finvoice.account": ("Tilinumero", "Kontonummer", "Account"),
    "finvoice.specification": ("Erittely", "Specifikation", "Specification"),
    "finvoice.reference": ("Myyjän viite", "Säljarens referens", "Seller's reference"),
    "finvoice.vat_number": ("ALV-numero", "Momsnummer", "VAT number"),
    "consumer": ("Kuluttaja", "Konsument", "Consumer"),
    # the /verify page and the signature on receipts (kuitti.signatures)
    "verify.title": ("Tarkista kuitti", "Kontrollera kvitto", "Verify a receipt"),
    "verify.intro": (
        "Lataa tai liitä tallennettu allekirjoitettu kuitti (signed_json).",
        "Ladda upp eller klistra in ett sparat signerat kvitto (signed_json).",
        "Upload or paste a saved signed receipt (signed_json).",
    ),
    "verify.file": ("Tiedosto", "Fil", "File"),
    "verify.paste": ("tai liitä se tähän", "eller klistra in det här", "or paste it here"),
    "verify.submit": ("Tarkista", "Kontrollera", "Verify"),
    "verify.valid": (
        "Aito: allekirjoitus täsmää.",
        "Äkta: signaturen stämmer.",
        "Genuine: the signature matches.",
    ),
    "verify.tampered": (
        "Muutettu: kuitti tai sen allekirjoitus ei ole se, joka allekirjoitettiin.",
        "Ändrat: kvittot eller dess signatur är inte det som signerades.",
        "Tampered: the receipt or its signature is not what was signed.",
    ),
    "verify.unknown_key": (
        "Tuntematon avain: kuittia ei ole allekirjoitettu julkaistulla avaimella.",
        "Okänd nyckel: kvittot är inte signerat med en publicerad nyckel.",
        "Unknown key: the receipt was not signed with a published key.",
    ),
    "verify.malformed": (
        "Tämä ei ole allekirjoitettu kuitti.",
        "Detta är inte ett signerat kvitto.",
        "This is not a signed receipt.",
    ),
    "verify.signed_by": ("Allekirjoittanut", "Signerat av", "Signed by"),
    "verify.receipt": ("Kuitti", "Kvitto", "Receipt"),
    "verify.key": ("avain", "nyckel", "key"),
    "verify.retired": ("avain poistettu käytöstä", "nyckeln pensionerad", "key retired"),
    "verify.stored": (
        "kuitti säilyttää tämän kuitin muuttumattomana.",
        "kuitti förvarar detta kvitto oförändrat.",
        "kuitti holds this receipt unchanged.",
    ),
    "verify.not_found": (
        "Tällä tunnisteella ei löydy allekirjoitettua kuittia.",
        "Inget signerat kvitto hittades med denna kod.",
        "No signed receipt matches this code.",
    ),
    "verify.in_log": (
        "Kuittilokissa {since} alkaen (puun pää {head}).",
        "I kvittologgen sedan {since} (trädhuvud {head}).",
        "In the receipt log since {since} (tree head {head}).",
    ),
    "verify.log_pending": (
        "Ei vielä kuittilokin allekirjoitetussa puun päässä: hae kuitti myöhemmin uudelleen.",
        "Ännu inte i ett signerat trädhuvud i kvittologgen: hämta kvittot igen senare.",
        "Not in a signed tree head of the receipt log yet: fetch the receipt again later.",
    ),
    "signature": ("Allekirjoitus", "Signatur", "Signature"),
    "signature.by": ("Allekirjoittanut", "Signerat av", "Signed by"),
    "signature.how": (
        "Tarkista kuitin aitous lukemalla QR-koodi tai avaamalla osoite:",
        "Kontrollera kvittots äkthet genom att skanna QR-koden eller öppna adressen:",
        "Check that this receipt is genuine: scan the QR code or open",
    ),
}

_INDEX = {Language.FI: 0, Language.SV: 1, Language.EN: 2}


def as_language(locale: str | None) -> Language:
    """The supported language for a locale string such as ``fi``, ``sv-FI`` or ``en_GB``."""
    if locale:
        head = locale.replace("_", "-").split("-", 1)[0].strip().lower()
        for language in LANGUAGES:
            if head == language.value:
                return language
    return DEFAULT_LANGUAGE


def translate(key: str, locale: str | None = None) -> str:
    """The label for ``key`` in ``locale`` (English, then the key itself, as fall-backs)."""
    entry = _MESSAGES.get(key)
    if entry is None:
        return key
    return entry[_INDEX[as_language(locale)]] or entry[_INDEX[Language.EN]]


def has_message(key: str) -> bool:
    return key in _MESSAGES


def negotiate_locale(accept_language: str | None) -> Language:
    """The best of fi/sv/en for an ``Accept-Language`` header (RFC 9110 q-values); English when
    nothing matches."""
    if not accept_language:
        return DEFAULT_LANGUAGE
    best: tuple[float, int, Language] | None = None
    for position, part in enumerate(accept_language.split(",")):
        if position >= 50:  # a header is short; never spend time on a hostile one
            break
        tag, _, params = part.strip().partition(";")
        tag = tag.strip().lower()
        if not tag:
            continue
        quality = 1.0
        for param in params.split(";"):
            name, _, value = param.strip().partition("=")
            if name.strip() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        if quality <= 0:
            continue
        head = tag.split("-", 1)[0]
        for language in LANGUAGES:
            if head == language.value:
                candidate = (quality, -position, language)
                if best is None or candidate[:2] > best[:2]:
                    best = candidate
    return best[2] if best else DEFAULT_LANGUAGE
