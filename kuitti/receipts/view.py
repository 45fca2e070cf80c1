"""The receipt view model: everything a receipt page or PDF shows, formatted for one language.

``build_view(document, locale=...)`` turns the validated receipt document into plain frozen
dataclasses of display strings. The receipt link page (HTML) and the service PDF both render this
one model, so they carry the same content. Formatting rules:

- amounts come from integer fractional units through ``Decimal`` (never floats), in the receipt's
  currency with that currency's number of decimals, in the language's style (Babel);
- dates and times are shown in the receipt's own UTC offset (a 14:03 receipt says 14:03);
- card numbers are shown masked only (at most the first six and last four digits);
- a verification block never makes building the view fail: its result says what went wrong.

Why one long module: it is one model covering every part a receipt can have (rows, discounts,
journeys, attachments, verifications), each a small dataclass with its builder beside it; the
page and the PDF must see all of it the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation, localcontext
from functools import lru_cache

from babel.dates import format_datetime
from babel.numbers import format_currency, format_decimal, format_percent, get_currency_precision

from kuitti.i18n import Language, as_language, has_message, translate
from kuitti.receipts import schema
from kuitti.receipts.formats import ocmf
from kuitti.receipts.formats.codes import Symbology, choose_symbology
from kuitti.receipts.formats.ocmf import VerificationResult
from kuitti.receipts.relations import NO_RELATIONS, RelatedReceipt, Relations

Pairs = tuple[tuple[str, str], ...]

_UNIT_KEYS = {
    "pcs": "pcs",
    "pc": "pcs",
    "kpl": "pcs",
    "st": "pcs",
    "c62": "pcs",
    "ea": "pcs",
}
_PIECES = {Language.FI: "kpl", Language.SV: "st", Language.EN: "pcs"}


# --------------------------------------------------------------------------------------------
# The model


@dataclass(frozen=True, slots=True)
class MerchantView:
    name: str
    company_id: str
    branch_name: str | None
    branch_sub_name: str | None
    branch_id: str | None
    pos_id: str | None
    address_lines: tuple[str, ...]
    phone: str | None
    email: str | None
    website: str | None


@dataclass(frozen=True, slots=True)
class DiscountView:
    description: str
    amount: str  # formatted, negative
    amount_minor: int  # as posted (fractional units)
    percentage: str | None  # formatted, e.g. "10 %"


@dataclass(frozen=True, slots=True)
class JourneyStopView:
    name: str
    place: str | None  # "city, country"
    time: str | None  # formatted in the stop's own offset
    coordinates: str | None


@dataclass(frozen=True, slots=True)
class JourneyView:
    type: str  # TRAIN, BUS, TAXI, FLIGHT, FERRY
    type_label: str
    id: str | None
    origin: JourneyStopView
    destination: JourneyStopView
    distance: str | None
    duration: str | None
    co2: str | None
    vehicle: str | None
    driver: str | None
    pickup_arrived_at: str | None

    @property
    def route(self) -> str:
        return f"{self.origin.name} → {self.destination.name}"


@dataclass(frozen=True, slots=True)
class RowView:
    name: str
    quantity: str  # formatted number, e.g. "0,5"
    unit: str  # e.g. "kpl", "kg"
    unit_price: str
    total: str  # incl. VAT, after discounts
    total_excl_vat: str
    vat_rates: str  # e.g. "14 %" or "14 % / 25,5 %"
    ean: str | None
    product_id: str | None
    free_text: str | None
    category: str | None
    tags: tuple[str, ...]
    discounts: tuple[DiscountView, ...]
    custom_attributes: Pairs
    journey: JourneyView | None

    @property
    def quantity_with_unit(self) -> str:
        return f"{self.quantity} {self.unit}".strip()


@dataclass(frozen=True, slots=True)
class VatRowView:
    rate: str
    code: str | None
    excl_vat: str
    vat: str
    incl_vat: str


@dataclass(frozen=True, slots=True)
class PaymentView:
    type: str  # CARD, CASH, LOYALTY, or another upper-case kind
    label: str
    amount: str
    masked_pan: str | None
    card_network: str | None
    details: Pairs  # (label, value) lines: card type, authorisation, reference, terminal…
    terminal_text: str | None  # the card terminal's slip, shown in a fixed-width font
    custom_attributes: Pairs


@dataclass(frozen=True, slots=True)
class TotalsView:
    excl_vat: str
    vat: str
    incl_vat: str
    currency: str
    incl_vat_minor: int


@dataclass(frozen=True, slots=True)
class AttachmentView:
    type: str  # BARCODE, QRCODE
    kind: str  # TICKET, RETURN, VOUCHER
    kind_label: str
    title: str
    description: str | None
    valid_until: str | None
    data: str
    symbology: Symbology  # how the code is drawn; NONE: shown as text only


@dataclass(frozen=True, slots=True)
class ReadingView:
    kind: str | None  # OCMF TX code: B, C, E, …
    kind_label: str
    time: str | None
    value: str | None  # e.g. "1 234,5 kWh"
    status: str | None


@dataclass(frozen=True, slots=True)
class RecordView:
    event: str  # "begin" or "end"
    event_label: str
    result: VerificationResult
    result_label: str
    reason: str | None
    meter: str | None  # vendor, model, serial
    readings: tuple[ReadingView, ...]


@dataclass(frozen=True, slots=True)
class VerificationView:
    type: str
    version: str
    transaction_id: str
    current_type: str
    result: VerificationResult
    result_label: str
    energy: str | None
    records: tuple[RecordView, ...]
    note: str


@dataclass(frozen=True, slots=True)
class ReceiptView:
    locale: Language
    kind: str  # PURCHASE, RETURN, PURCHASE_AND_RETURN
    kind_label: str
    number: str
    time: str  # formatted in the receipt's own offset
    time_iso: str  # as posted
    receipt_time: datetime  # aware, in the receipt's own offset
    time_short: str
    merchant: MerchantView
    rows: tuple[RowView, ...]
    vats: tuple[VatRowView, ...]
    payments: tuple[PaymentView, ...]
    totals: TotalsView
    free_text: str | None
    custom_attributes: Pairs
    attachments: tuple[AttachmentView, ...]
    verifications: tuple[VerificationView, ...]
    # "Return of receipt …" on a return, "Returned on …" on its purchase (one line each)
    relations: tuple[str, ...] = ()

    @property
    def title(self) -> str:
        return f"{self.kind_label} {self.number} – {self.merchant.name}"

    def label(self, key: str) -> str:
        return translate(key, self.locale)


# --------------------------------------------------------------------------------------------
# Formatting helpers


class Formatter:
    """Locale- and currency-bound formatting, exact (Decimal) throughout."""

    def __init__(self, locale: Language, currency: str) -> None:
        self.locale = locale
        self.currency = currency
        self.digits = _currency_digits(currency)

    def money(self, minor: int) -> str:
        return format_money(minor, self.currency, self.locale.value)

    def number(self, value: Decimal) -> str:
        return format_decimal(value, locale=self.locale.value, decimal_quantization=False)

    def rate(self, text: str) -> str:
        try:
            value = Decimal(text)
        except InvalidOperation:
            return text
        return format_percent(value / 100, locale=self.locale.value, decimal_quantization=False)

    def moment(self, iso: str | None, fmt: str = "medium") -> str | None:
        if not iso:
            return None
        try:
            moment = datetime.fromisoformat(iso)
        except ValueError:
            return iso
        return datetime_text(moment, self.locale, fmt)

    def label(self, key: str) -> str:
        return translate(key, self.locale)


@lru_cache(maxsize=64)
def _currency_digits(currency: str) -> int:
    return int(get_currency_precision(currency))


@lru_cache(maxsize=4096)
def format_money(minor: int, currency: str, locale: str, *, code: bool = False) -> str:
    """``minor`` units of ``currency`` as text in ``locale``, with the currency's own number of
    decimals (two for EUR, none for JPY, three for KWD). ``code`` writes ``EUR`` where the
    locale would write ``€`` (a list of receipts in many currencies)."""
    value = Decimal(minor).scaleb(-_currency_digits(currency))
    if code:
        return format_currency(value, currency, format="#,##0.00 ¤¤", locale=locale)
    return format_currency(value, currency, locale=locale)


def datetime_text(moment: datetime, locale: Language, fmt: str = "medium") -> str:
    """A date-time in its own offset (Babel would otherwise convert aware values to UTC)."""
    if moment.tzinfo is not None:
        moment = moment.replace(tzinfo=None)
    return format_datetime(moment, fmt, locale=locale.value)


def mask_pan(text: str) -> str:
    """A card number with at most the first six and the last four digits visible."""
    digits_total = sum(c.isdigit() for c in text)
    seen = 0
    out: list[str] = []
    for c in text:
        if c.isdigit():
            seen += 1
            out.append(c if seen <= 6 or seen > digits_total - 4 else "*")
        else:
            out.append(c)
    return "".join(out)


def _pairs(attributes: Sequence[dict[str, str]] | None) -> Pairs:
    result: list[tuple[str, str]] = []
    for item in attributes or ():
        for key, value in item.items():
            result.append((key, value))
    return tuple(result)


def _unit(code: str, locale: Language) -> str:
    key = _UNIT_KEYS.get(code.strip().lower())
    return _PIECES[locale] if key == "pcs" else code


def _decimal(value: int | float | str) -> Decimal:
    # Journey distances may be JSON numbers with a fraction; go through their text, not a float.
    return Decimal(str(value))


def _distance(metres: int | float, f: Formatter) -> str:
    value = _decimal(metres)
    # Room for every float's digits: a receipt stored before posts were refused a distance
    # beyond 2**63 may hold one up to 1.8e308, which the default 28 digits cannot round.
    with localcontext(prec=400):
        if value >= 1000:
            return f"{f.number((value / 1000).quantize(Decimal('0.1'), ROUND_HALF_UP))} km"
        return f"{f.number(value.quantize(Decimal('1')))} m"


def _duration(minutes: int | float, f: Formatter) -> str:
    total = int(_decimal(minutes).to_integral_value())
    hours, rest = divmod(total, 60)
    unit = f.label("minutes")
    return f"{hours} h {rest} {unit}" if hours else f"{rest} {unit}"


def _co2(grams: int, f: Formatter) -> str:
    if grams >= 1000:
        return f"{f.number((Decimal(grams) / 1000).quantize(Decimal('0.1'), ROUND_HALF_UP))} kg"
    return f"{f.number(Decimal(grams))} g"


# --------------------------------------------------------------------------------------------
# Building


def _merchant(merchant: schema.Merchant) -> MerchantView:
    branch = merchant.branch
    lines: tuple[str, ...] = ()
    if branch is not None:
        address = branch.address
        city_line = " ".join(p for p in (address.zipCode, address.city) if p)
        lines = tuple(p for p in (address.streetAddress, city_line, address.country) if p)
    return MerchantView(
        name=merchant.name,
        company_id=merchant.companyID,
        branch_name=branch.name if branch else None,
        branch_sub_name=branch.subName if branch else None,
        branch_id=branch.id if branch else None,
        pos_id=branch.posId if branch else None,
        address_lines=lines,
        phone=branch.phone if branch else None,
        email=branch.email if branch else None,
        website=branch.websiteURL if branch else None,
    )


def _stop(stop: schema.JourneyLocation, f: Formatter) -> JourneyStopView:
    place = ", ".join(p for p in (stop.city, stop.country) if p) or None
    coordinates = f"{stop.latitude}, {stop.longitude}" if stop.latitude and stop.longitude else None
    return JourneyStopView(stop.name, place, f.moment(stop.datetime, "short"), coordinates)


def _journey(journey: schema.Journey, f: Formatter) -> JourneyView:
    vehicle = None
    if journey.vehicle is not None:
        v = journey.vehicle
        name = " ".join(p for p in (v.make, v.model) if p)
        extras = ", ".join(p for p in (v.category, v.powertrain) if p)
        vehicle = ", ".join(p for p in (name, v.licensePlate) if p)
        if extras:
            vehicle = f"{vehicle} ({extras})"
        if v.phoneNumber:
            vehicle = f"{vehicle}, {v.phoneNumber}"
    return JourneyView(
        type=journey.type,
        type_label=f.label(f"journey.{journey.type}"),
        id=journey.id,
        origin=_stop(journey.origin, f),
        destination=_stop(journey.destination, f),
        distance=_distance(journey.distance, f) if journey.distance is not None else None,
        duration=_duration(journey.duration, f) if journey.duration is not None else None,
        co2=_co2(journey.CO2Emissions, f) if journey.CO2Emissions is not None else None,
        vehicle=vehicle,
        driver=journey.driver.id if journey.driver else None,
        pickup_arrived_at=f.moment(journey.pickupArrivedAt, "short"),
    )


def _row(product: schema.Product, f: Formatter) -> RowView:
    try:
        quantity = f.number(Decimal(product["quantity"]))
    except InvalidOperation:
        quantity = product["quantity"]
    category = None
    tags: tuple[str, ...] = ()
    c = product.get("categorization")
    if c is not None:
        category = " / ".join(str(p) for p in (c.main, c.product, c.sub) if p is not None)
        tags = tuple(c.tags or ())
    discounts = tuple(
        DiscountView(
            description=d.description,
            amount=f.money(-abs(d.amount)),
            amount_minor=d.amount,
            percentage=f.rate(d.percentage) if d.percentage else None,
        )
        for d in product.get("discounts") or ()
    )
    journey = product.get("journey")
    return RowView(
        name=product["name"],
        quantity=quantity,
        unit=_unit(product["quantityCode"], f.locale),
        unit_price=f.money(product["unitPriceIncVAT"]),
        total=f.money(product["totalAmountIncVAT"]),
        total_excl_vat=f.money(product["totalAmountExcVAT"]),
        vat_rates=" / ".join(f.rate(v["VATRate"]) for v in product["vats"]),
        ean=product.get("EANCode"),
        product_id=product.get("productId"),
        free_text=product.get("freeText"),
        category=category or None,
        tags=tags,
        discounts=discounts,
        custom_attributes=_pairs(product.get("customAttributes")),
        journey=_journey(journey, f) if journey else None,
    )


def _payment(payment: schema.Payment, f: Formatter) -> PaymentView:
    key = f"payment.{payment.type}"
    label = f.label(key) if has_message(key) else payment.type.replace("_", " ").title()
    details: list[tuple[str, str]] = []
    masked = network = raw = None
    match payment:
        case schema.CardPayment(attributes=attrs) if attrs is not None:
            masked = mask_pan(attrs.maskedPAN) if attrs.maskedPAN else None
            network = attrs.cardNetwork
            raw = attrs.transactionRawText
            for label_key, value in (
                ("card_network", " ".join(p for p in (attrs.cardNetwork, attrs.cardType) if p)),
                ("authorization_code", attrs.authorizationCode),
                ("reference", attrs.referenceNumber),
                ("terminal", attrs.terminalId),
                ("time", f.moment(attrs.timeStamp)),
            ):
                if value:
                    details.append((f.label(label_key), value))
        case schema.LoyaltyPayment(attributes=attrs) if attrs is not None:
            masked = mask_pan(attrs.maskedPAN) if attrs.maskedPAN else None
            if attrs.cardType:
                details.append((f.label("card_number"), attrs.cardType))
        case schema.CashPayment(attributes=attrs) if attrs is not None:
            if attrs.handedAmount is not None:
                details.append((f.label("handed_amount"), f.money(attrs.handedAmount)))
                details.append((f.label("change"), f.money(attrs.handedAmount - payment.amount)))
        case _:
            pass
    return PaymentView(
        type=payment.type,
        label=label,
        amount=f.money(payment.amount),
        masked_pan=masked,
        card_network=network,
        details=tuple(details),
        terminal_text=raw,
        custom_attributes=_pairs(payment.customAttributes),
    )


def _attachment(attachment: schema.Attachment, f: Formatter) -> AttachmentView:
    return AttachmentView(
        type=attachment.type,
        kind=attachment.kind,
        kind_label=f.label(f"attachment.{attachment.kind}"),
        title=attachment.title,
        description=attachment.description,
        valid_until=f.moment(attachment.validUntil),
        data=attachment.data,
        symbology=choose_symbology(attachment.type, attachment.data),
    )


_READING_KEYS = {"B": "reading.begin", "E": "reading.end", "L": "reading.end", "R": "reading.end"}


def _reading(reading: ocmf.Reading, f: Formatter) -> ReadingView:
    value = None
    if reading.value is not None:
        value = f.number(reading.value)
        if reading.unit:
            value = f"{value} {reading.unit}"
    kind = reading.kind
    label = f.label(_READING_KEYS[kind]) if kind in _READING_KEYS else (kind or "")
    time = datetime_text(reading.time, f.locale) if reading.time is not None else reading.time_text
    return ReadingView(kind=kind, kind_label=label, time=time, value=value, status=reading.status)


def _energy(records: Sequence[ocmf.OcmfRecord], f: Formatter) -> str | None:
    readings = [r for record in records for r in record.readings if r.value is not None]
    if len(readings) < 2:
        return None
    first, last = readings[0], readings[-1]
    if first.unit != last.unit or first.value is None or last.value is None:
        return None
    return f"{f.number(last.value - first.value)} {first.unit or ''}".strip()


def _verification(verification: schema.Verification, f: Formatter) -> VerificationView:
    events = [("begin", verification.transactionBegin), ("end", verification.transactionEnd)]
    records: list[ocmf.OcmfRecord] = []
    views: list[RecordView] = []
    for event, data in events:
        if data is None:
            continue
        if verification.type.strip().upper() == "OCMF":
            record = ocmf.verify(data.signedData, verification.publicKey)
        else:
            record = ocmf.OcmfRecord(
                VerificationResult.UNVERIFIABLE,
                f"unsupported verification type {verification.type}",
            )
        records.append(record)
        meter = " ".join(
            p for p in (record.meter_vendor, record.meter_model, record.meter_serial) if p
        )
        views.append(
            RecordView(
                event=event,
                event_label=f.label(f"reading.{event}"),
                result=record.result,
                result_label=f.label(_result_key(record.result)),
                reason=record.reason,
                meter=meter or None,
                readings=tuple(_reading(r, f) for r in record.readings),
            )
        )
    result = ocmf.combine([r.result for r in records])
    return VerificationView(
        type=verification.type,
        version=verification.version,
        transaction_id=verification.transactionId,
        current_type=verification.currentType,
        result=result,
        result_label=f.label(_result_key(result)),
        energy=_energy(records, f),
        records=tuple(views),
        note=f.label("public_key_note"),
    )


def _result_key(result: VerificationResult) -> str:
    match result:
        case VerificationResult.VALID:
            return "verification.valid"
        case VerificationResult.INVALID:
            return "verification.invalid"
        case VerificationResult.UNVERIFIABLE:
            return "verification.unverifiable"


def parse_document(document: schema.Receipt | str | bytes) -> schema.Receipt:
    """The validated document model of a stored receipt (``models.Receipt.document`` text)."""
    if isinstance(document, schema.Receipt):
        return document
    return schema.Receipt.model_validate_json(document)


def relation_lines(relations: Relations, language: Language) -> tuple[str, ...]:
    """The relation of a return and its purchase, one line per related receipt."""
    lines = []
    if relations.original is not None:
        lines.append(_relation_line("return_of", relations.original, language))
    lines.extend(_relation_line("returned_on", r, language) for r in relations.returns)
    return tuple(lines)


def _relation_line(key: str, related: RelatedReceipt, language: Language) -> str:
    date = datetime_text(related.moment, language, "short")
    return translate(key, language).format(number=related.number, date=date)


def build_view(
    document: schema.Receipt | str | bytes,
    *,
    locale: str = "en",
    relations: Relations = NO_RELATIONS,
) -> ReceiptView:
    """The view model of a validated receipt document, formatted for ``locale`` (fi, sv, en).

    ``document`` is the validated model, or the stored JSON text (``models.Receipt.document``);
    ``relations`` its return's original or its purchase's returns."""
    document = parse_document(document)
    language = as_language(locale)
    f = Formatter(language, document.currencyISOCode)
    moment = document.receipt_time
    return ReceiptView(
        locale=language,
        kind=document.kind,
        kind_label=f.label(f"receipt.{document.kind}"),
        number=document.receiptNumber,
        time=datetime_text(moment, language),
        time_iso=document.receiptTimeStamp,
        receipt_time=moment,
        time_short=datetime_text(moment, language, "short"),
        merchant=_merchant(document.merchant),
        rows=tuple(_row(p, f) for p in document.products),
        vats=tuple(
            VatRowView(
                rate=f.rate(v.VATRate),
                code=v.VATCode,
                excl_vat=f.money(v.totalAmountExcVAT),
                vat=f.money(v.totalVATAmount),
                incl_vat=f.money(v.totalAmountIncVAT),
            )
            for v in document.vats
        ),
        payments=tuple(_payment(p, f) for p in document.payments or ()),
        totals=TotalsView(
            excl_vat=f.money(document.totalPriceExcVAT),
            vat=f.money(document.totalVATAmount),
            incl_vat=f.money(document.totalPriceIncVAT),
            currency=document.currencyISOCode,
            incl_vat_minor=document.totalPriceIncVAT,
        ),
        free_text=document.freeText,
        custom_attributes=_pairs(document.customAttributes),
        attachments=tuple(_attachment(a, f) for a in document.attachments or ()),
        verifications=tuple(_verification(v, f) for v in document.verifications or ()),
        relations=relation_lines(relations, language),
    )
