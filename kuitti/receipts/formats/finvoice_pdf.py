"""A Finvoice document drawn as a PDF in the usual Finnish invoice layout (``finvoice_pdf``).

It is drawn from the Finvoice XML itself (parsed with lxml), not from the receipt JSON, so the PDF
shows exactly what the Finvoice carries: seller and buyer, the receipt details box, the rows, the
VAT breakdown, totals, the payment status ("paid, payable 0,00") and, in the footer of every page,
the seller's contact details and bank account, as Finnish invoices have them. The Finvoice XML is
embedded in the PDF as ``finvoice.xml`` (PDF/A-3 ``Source``).

Why one long module: one drawing method per invoice section, in page order; the toolkit
itself is ``pdfkit``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from babel.numbers import get_decimal_symbol, get_group_symbol
from lxml import etree

from kuitti.i18n import Language, as_language, translate
from kuitti.receipts.formats import pdfkit
from kuitti.receipts.formats.pdfkit import (
    ACCENT,
    BOLD,
    GREY,
    MONO,
    REGULAR,
    Block,
    EmbeddedFile,
    Flow,
    Metadata,
    wrap,
)

A4 = (595.28, 841.89)
FOOTER_HEIGHT = 64.0


@dataclass(slots=True)
class FinvoiceRow:
    name: str
    article: str | None
    ean: str | None
    quantity: str | None
    unit: str | None
    unit_price: str | None
    vat_rate: str | None
    vat: str | None
    excl_vat: str | None
    total: str | None
    discount: str | None
    texts: list[str] = field(default_factory=list)


@dataclass(slots=True)
class VatLine:
    rate: str | None
    code: str | None
    base: str | None
    vat: str | None


@dataclass(slots=True)
class FinvoiceData:
    type_text: str
    type_code: str
    number: str
    date: str | None
    timestamp: str | None
    reference: str | None
    currency: str
    seller_name: str
    seller_trading_name: str | None
    seller_department: str | None
    seller_id: str | None
    seller_vat_number: str | None
    seller_address: list[str]
    seller_contact: list[str]
    iban: str | None
    bic: str | None
    buyer_name: str
    rows_excl_vat: str | None
    total_excl_vat: str | None
    total_vat: str | None
    total_incl_vat: str | None
    paid: str | None
    payable: str | None
    payment_status: str | None
    payment_method: str | None
    card: str | None
    vats: list[VatLine]
    free_texts: list[str]
    rows: list[FinvoiceRow]
    specification: list[str]


def _t(node: Any, path: str) -> str | None:
    value = node.findtext(path)
    if value is None:
        return None
    value = value.strip()
    return value or None


def _date(value: str | None) -> str | None:
    if value and len(value) == 8 and value.isdigit():
        return f"{int(value[6:8])}.{int(value[4:6])}.{value[:4]}"
    return value


def parse_finvoice(xml: bytes) -> FinvoiceData:
    """The parts of a Finvoice document that the PDF shows."""
    parser = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=False)
    root = etree.fromstring(xml, parser)
    details = root.find("InvoiceDetails")
    seller = root.find("SellerPartyDetails")
    info = root.find("SellerInformationDetails")
    assert details is not None
    assert seller is not None
    total = details.find("InvoiceTotalVatIncludedAmount")
    currency = total.get("AmountCurrencyIdentifier", "EUR") if total is not None else "EUR"
    address: list[str] = []
    postal = seller.find("SellerPostalAddressDetails")
    if postal is not None:
        address.extend(s.text.strip() for s in postal.findall("SellerStreetName") if s.text)
        town = " ".join(
            p for p in (_t(postal, "SellerPostCodeIdentifier"), _t(postal, "SellerTownName")) if p
        )
        if town:
            address.append(town)
        country = _t(postal, "CountryName") or _t(postal, "CountryCode")
        if country:
            address.append(country)
    contact: list[str] = []
    if info is not None:
        for path in (
            "SellerPhoneNumber",
            "SellerCommonEmailaddressIdentifier",
            "SellerWebaddressIdentifier",
        ):
            value = _t(info, path)
            if value:
                contact.append(value)
    rows: list[FinvoiceRow] = []
    for row in root.findall("InvoiceRow"):
        quantity = row.find("InvoicedQuantity")
        rows.append(
            FinvoiceRow(
                name=_t(row, "ArticleName") or "",
                article=_t(row, "ArticleIdentifier"),
                ean=_t(row, "EanCode"),
                quantity=quantity.text.strip() if quantity is not None and quantity.text else None,
                unit=quantity.get("QuantityUnitCode") if quantity is not None else None,
                unit_price=_t(row, "UnitPriceVatIncludedAmount"),
                vat_rate=_t(row, "RowVatRatePercent"),
                vat=_t(row, "RowVatAmount"),
                excl_vat=_t(row, "RowVatExcludedAmount"),
                total=_t(row, "RowAmount"),
                discount=_t(row, "RowDiscountAmount"),
                texts=[t.text.strip() for t in row.findall("RowFreeText") if t.text],
            )
        )
    vats = [
        VatLine(
            rate=_t(spec, "VatRatePercent"),
            code=_t(spec, "VatCode"),
            base=_t(spec, "VatBaseAmount"),
            vat=_t(spec, "VatRateAmount"),
        )
        for spec in details.findall("VatSpecificationDetails")
    ]
    return FinvoiceData(
        type_text=_t(details, "InvoiceTypeText") or "KUITTI",
        type_code=_t(details, "InvoiceTypeCode") or "",
        number=_t(details, "InvoiceNumber") or "",
        date=_date(_t(details, "InvoiceDate")),
        timestamp=_t(root, "MessageTransmissionDetails/MessageDetails/MessageTimeStamp"),
        reference=_t(details, "SellerReferenceIdentifier"),
        currency=currency,
        seller_name=_t(seller, "SellerOrganisationName") or "",
        seller_trading_name=_t(seller, "SellerOrganisationTradingName"),
        seller_department=_t(seller, "SellerOrganisationDepartment"),
        seller_id=_t(seller, "SellerPartyIdentifier"),
        seller_vat_number=_t(seller, "SellerOrganisationTaxCode"),
        seller_address=address,
        seller_contact=contact,
        iban=_t(root, "EpiDetails/EpiPartyDetails/EpiBeneficiaryPartyDetails/EpiAccountID"),
        bic=_t(root, "EpiDetails/EpiPartyDetails/EpiBfiPartyDetails/EpiBfiIdentifier"),
        buyer_name=_t(root, "BuyerPartyDetails/BuyerOrganisationName") or "",
        rows_excl_vat=_t(details, "RowsTotalVatExcludedAmount"),
        total_excl_vat=_t(details, "InvoiceTotalVatExcludedAmount"),
        total_vat=_t(details, "InvoiceTotalVatAmount"),
        total_incl_vat=_t(details, "InvoiceTotalVatIncludedAmount"),
        paid=_t(details, "InvoicePaidAmount"),
        payable=_t(root, "EpiDetails/EpiPaymentInstructionDetails/EpiInstructedAmount"),
        payment_status=_t(root, "PaymentStatusDetails/PaymentStatusCode"),
        payment_method=_t(root, "PaymentStatusDetails/PaymentMethodText"),
        card=_t(root, "PaymentCardInfo/PrimaryAccountNumber"),
        vats=vats,
        free_texts=[t.text.strip() for t in details.findall("InvoiceFreeText") if t.text],
        rows=rows,
        specification=[
            t.text.rstrip()
            for t in root.findall("SpecificationDetails/SpecificationFreeText")
            if t.text
        ],
    )


class _Writer:
    def __init__(
        self, data: FinvoiceData, locale: Language, relations: tuple[str, ...] = ()
    ) -> None:
        self.data = data
        self.locale = locale
        self.relations = relations
        self.flow = Flow(
            page_width=A4[0],
            page_height=A4[1],
            margin_x=48,
            margin_top=44,
            margin_bottom=44 + FOOTER_HEIGHT,
        )

        self.decimal = get_decimal_symbol(locale.value)
        self.group = get_group_symbol(locale.value)

    def t(self, key: str) -> str:
        return translate(key, self.locale)

    def number(self, value: str | None, *, min_decimals: int = 0) -> str:
        """A Finvoice number (``-1234,50``) in the language's style (``-1 234,50``).

        Pure string work on the digits as written (they are exact decimals already): no float,
        and fast enough for hundreds of cells."""
        if value is None:
            return ""
        text = value.strip()
        sign = ""
        if text.startswith("-"):
            sign, text = "-", text[1:]
        whole, _, fraction = text.replace(".", ",").partition(",")
        if not whole.isdigit() or (fraction and not fraction.isdigit()):
            return value
        fraction = fraction.rstrip("0").ljust(min_decimals, "0") if min_decimals else fraction
        groups: list[str] = []
        while len(whole) > 3:
            groups.insert(0, whole[-3:])
            whole = whole[:-3]
        groups.insert(0, whole)
        result = self.group.join(groups)
        if fraction:
            result = f"{result}{self.decimal}{fraction}"
        return f"{sign}{result}"

    def amount(self, value: str | None) -> str:
        return self.number(value, min_decimals=2)

    def rate(self, value: str | None) -> str:
        return f"{self.number(value)} %" if value is not None else ""

    def quantity(self, value: str | None) -> str:
        return self.number(value)

    # ---- sections ----------------------------------------------------------------------------

    def header(self) -> None:
        d, flow = self.data, self.flow
        block = Block()
        y = 0.0
        left_width = flow.width * 0.52
        lines: list[tuple[str, str, float, pdfkit.Color]] = [
            (d.seller_name, BOLD, 14, pdfkit.BLACK)
        ]
        for value in (d.seller_trading_name, d.seller_department):
            if value:
                lines.append((value, REGULAR, 9.5, pdfkit.BLACK))
        lines.extend((a, REGULAR, 8.5, GREY) for a in d.seller_address)
        for text, font, size, color in lines:
            for line in wrap(text, font, size, left_width, max_lines=3):
                y += size * 1.3
                block.text(flow.left, y - size * 0.25, line, font, size, color=color)
        y += 14
        block.text(flow.left, y, self.t("finvoice.buyer"), BOLD, 7.5, color=GREY)
        y += 12
        block.text(
            flow.left, y, pdfkit.ellipsize(d.buyer_name, REGULAR, 10, left_width), REGULAR, 10
        )
        left_height = y
        # right: the document title and the details box
        box_x = flow.left + flow.width * 0.56
        box_w = flow.right - box_x
        block.text(box_x, 16, d.type_text, BOLD, 16, color=ACCENT)
        pairs = [
            (self.t("date"), d.date),
            (self.t("receipt_number"), d.number),
            (self.t("finvoice.reference"), d.reference),
            (self.t("time"), self._timestamp()),
            (self.t("business_id"), d.seller_id),
            (self.t("finvoice.vat_number"), d.seller_vat_number),
        ]
        ry = 30.0
        label_w = 78.0
        for label, value in pairs:
            if not value:
                continue
            value_lines = wrap(value, REGULAR, 8.5, box_w - label_w - 8, max_lines=3)
            block.text(box_x + 6, ry + 11, label, REGULAR, 7.5, color=GREY)
            for index, line in enumerate(value_lines):
                block.text(box_x + 6 + label_w, ry + 11 + index * 11, line, REGULAR, 8.5)
            ry += 11 * len(value_lines) + 3
        for relation in self.relations:
            for line in wrap(relation, BOLD, 8.5, box_w - 12, max_lines=2):
                block.text(box_x + 6, ry + 11, line, BOLD, 8.5, color=ACCENT)
                ry += 11
            ry += 3
        block.rect(box_x, 26, box_w, 0.6, ACCENT)
        block.rect(box_x, ry + 4, box_w, 0.6, ACCENT)
        block.grow(max(left_height, ry + 4) + 16)
        flow.place(block)

    def _timestamp(self) -> str | None:
        stamp = self.data.timestamp
        if not stamp:
            return None
        try:
            moment = datetime.fromisoformat(stamp)
        except ValueError:
            return stamp
        return moment.strftime("%H:%M:%S")

    def columns(self) -> dict[str, float]:
        """Right edges of the numeric columns."""
        right = self.flow.right
        return {
            "total": right,
            "excl": right - 62,
            "vat": right - 118,
            "rate": right - 160,
            "price": right - 200,
            "unit": right - 248,
            "qty": right - 270,
        }

    def rows_header(self, flow: Flow) -> None:
        c = self.columns()
        block = Block(height=20)
        s = 7
        block.rect(flow.left, 0, flow.width, 16, (0.93, 0.95, 0.96))
        block.text(flow.left + 4, 11, self.t("product"), BOLD, s)
        for key, label in (
            ("qty", self.t("quantity")),
            ("price", self.t("unit_price")),
            ("rate", self.t("vat_rate")),
            ("vat", self.t("vat_amount")),
            ("excl", self.t("excl_vat")),
            ("total", self.t("row_total")),
        ):
            block.text(c[key] - (4 if key == "total" else 0), 11, label, BOLD, s, align="r")
        flow.place(block)

    def continuation(self, flow: Flow) -> None:
        block = Block(height=16)
        block.text(
            flow.left,
            8,
            f"{self.data.seller_name} · {self.data.type_text} {self.data.number}",
            REGULAR,
            7.5,
            color=GREY,
        )
        flow.place(block)

    def row(self, row: FinvoiceRow) -> None:
        flow, c = self.flow, self.columns()
        b, s = 8.5, 7
        block = Block()
        name_width = c["qty"] - 34 - flow.left - 4
        title = row.name or row.article or ""
        names = wrap(title, REGULAR, b, name_width, max_lines=4)
        y = b * 1.35
        block.text(flow.left + 4, y - 2, names[0], REGULAR, b)
        base = y - 2
        block.cell(c["qty"], base, self.quantity(row.quantity), 32, REGULAR, b)
        if row.unit:
            block.text(
                c["qty"] + 3,
                base,
                pdfkit.ellipsize(row.unit, REGULAR, s, 26),
                REGULAR,
                s,
                color=GREY,
            )
        block.cell(c["price"], base, self.amount(row.unit_price), 44, REGULAR, b)
        block.cell(c["rate"], base, self.rate(row.vat_rate), 36, REGULAR, b)
        block.cell(c["vat"], base, self.amount(row.vat), 38, REGULAR, b)
        block.cell(c["excl"], base, self.amount(row.excl_vat), 52, REGULAR, b)
        block.cell(c["total"] - 4, base, self.amount(row.total), 54, REGULAR, b)
        for line in names[1:]:
            y += b * 1.3
            block.text(flow.left + 4, y - 2, line, REGULAR, b)
        extra = []
        ids = [p for p in (row.article, f"EAN {row.ean}" if row.ean else None) if p]
        if ids:
            extra.append(" · ".join(ids))
        extra.extend(row.texts)
        for text in extra:
            for line in wrap(text, REGULAR, s, c["price"] - flow.left - 60, max_lines=6):
                y += s * 1.35
                block.text(flow.left + 12, y - 1.5, line, REGULAR, s, color=GREY)
        block.grow(y + 4)
        block.line(flow.left, flow.right, y + 3, width=0.25)
        flow.place(block)

    def rows(self) -> None:
        pdfkit.table(
            self.flow,
            self.data.rows,
            self.row,
            header=self.rows_header,
            continuation=self.continuation,
        )

    def totals(self) -> None:
        d, flow = self.data, self.flow
        block = Block()
        y = 6.0
        widest = pdfkit.text_width(f"{self.amount(d.total_incl_vat)} {d.currency}", BOLD, 12)
        label_r = flow.right - min(flow.width * 0.5, max(96.0, widest + 16))
        value_width = flow.right - label_r - 12
        for key, value in (("total_excl_vat", d.total_excl_vat), ("total_vat", d.total_vat)):
            y += 12
            block.text(label_r, y, self.t(key), REGULAR, 8.5, align="r", color=GREY)
            block.cell(
                flow.right - 4, y, f"{self.amount(value)} {d.currency}", value_width, size=8.5
            )
        y += 18
        block.text(label_r, y, self.t("total"), BOLD, 12, align="r")
        total = f"{self.amount(d.total_incl_vat)} {d.currency}"
        block.cell(flow.right - 4, y, total, value_width, BOLD, 12)
        block.grow(y + 8)
        flow.place(block)

    def heading(self, text: str) -> None:
        flow = self.flow
        flow.space(8)
        block = Block(height=16)
        block.text(flow.left, 10, text, BOLD, 9.5, color=ACCENT)
        block.line(flow.left, flow.right, 14, width=0.6, color=ACCENT)
        flow.place(block, gap_after=2)

    def vat_table(self) -> None:
        d, flow = self.data, self.flow
        self.heading(self.t("vat_breakdown"))
        edges = [flow.left + 120, flow.left + 220, flow.left + 300]
        head = Block(height=12)
        head.text(flow.left, 8, self.t("vat_rate"), BOLD, 7.5, color=GREY)
        for edge, key in zip(edges, ("excl_vat", "vat_amount", "vat_code"), strict=True):
            head.text(edge, 8, self.t(key), BOLD, 7.5, align="r", color=GREY)
        flow.place(head)
        for vat in d.vats:
            block = Block(height=12)
            block.text(flow.left, 9, self.rate(vat.rate), REGULAR, 8.5)
            block.cell(edges[0], 9, self.amount(vat.base), 76, REGULAR, 8.5)
            block.cell(edges[1], 9, self.amount(vat.vat), 76, REGULAR, 8.5)
            block.text(edges[2], 9, vat.code or "", REGULAR, 8.5, align="r")
            flow.place(block)

    def payment(self) -> None:
        d = self.data
        self.heading(self.t("finvoice.payment_status"))
        status = self.t("finvoice.paid") if d.payment_status == "PAID" else (d.payment_status or "")
        pairs = [
            (self.t("finvoice.payment_status"), status),
            (self.t("finvoice.payment_method"), d.payment_method),
            (self.t("card_number"), d.card),
            (
                self.t("finvoice.paid_amount"),
                f"{self.amount(d.paid)} {d.currency}" if d.paid else None,
            ),
            (
                self.t("finvoice.payable"),
                f"{self.amount(d.payable)} {d.currency}" if d.payable else None,
            ),
        ]
        for label, value in pairs:
            if not value:
                continue
            block = Block(height=12)
            block.text(self.flow.left, 9, label, REGULAR, 8.5, color=GREY)
            block.text(
                self.flow.left + 130, 9, value, BOLD if label == pairs[0][0] else REGULAR, 8.5
            )
            self.flow.place(block)

    def texts(self) -> None:
        d, flow = self.data, self.flow
        if d.free_texts:
            self.heading(self.t("details"))
            for text in d.free_texts:
                for line in wrap(text, REGULAR, 8, flow.width):
                    block = Block(height=10.5)
                    block.text(flow.left, 8, line, REGULAR, 8)
                    flow.place(block)
        if d.specification:
            self.heading(self.t("finvoice.specification"))
            for line in d.specification:
                block = Block(height=9.5)
                block.text(flow.left + 6, 7.5, line, MONO, 7)
                flow.place(block)

    def build(self) -> Flow:
        self.flow.on_new_page = self.continuation
        self.header()
        self.rows()
        self.totals()
        self.vat_table()
        self.payment()
        self.texts()
        return self.flow

    def footer(self, canvas: Any, number: int, total: int, page_height: float) -> None:
        d, flow = self.data, self.flow
        top = flow.margin_bottom - 16
        canvas.setStrokeColorRGB(*ACCENT)
        canvas.setLineWidth(0.6)
        canvas.line(flow.left, top, flow.right, top)
        third = flow.width / 3
        columns = [
            [d.seller_name, *d.seller_address],
            [
                *(f"{self.t('business_id')} {d.seller_id}" for _ in [0] if d.seller_id),
                *d.seller_contact,
            ],
            [
                self.t("finvoice.account"),
                *(v for v in (d.iban, f"BIC {d.bic}" if d.bic else None) if v),
            ],
        ]
        for index, lines in enumerate(columns):
            y = top - 11
            for line in lines[:5]:
                canvas.setFont(REGULAR, 7)
                canvas.setFillColorRGB(*GREY)
                text = pdfkit.visual(pdfkit.ellipsize(line, REGULAR, 7, third - 8))
                canvas.drawString(flow.left + index * third, y, text)
                y -= 9
        canvas.setFont(REGULAR, 7)
        canvas.drawRightString(flow.right, 20, f"{self.t('page')} {number} / {total}")


def render_finvoice_pdf(
    xml: bytes,
    *,
    locale: str = "en",
    created: datetime,
    identity: str,
    relations: tuple[str, ...] = (),
    test_mark: bool = False,
) -> bytes:
    """The Finvoice document ``xml`` as a PDF; ``created`` is the receipt's time; ``relations``
    the lines that relate a return and its purchase (``view.relation_lines``). ``test_mark``:
    a sandbox receipt, marked TEST on every page (the XML itself is unchanged)."""
    data = parse_finvoice(xml)
    language = as_language(locale)
    writer = _Writer(data, language, relations)
    flow = writer.build()
    meta = Metadata(
        title=f"{data.type_text} {data.number} – {data.seller_name}",
        author=data.seller_name,
        subject=f"Finvoice 3.0 {data.type_code} {data.number}",
        created=created,
        identity=identity,
        keywords="Finvoice 3.0",
        language=language.value,
    )
    embedded = [
        EmbeddedFile(
            name="finvoice.xml",
            content=xml,
            mime="application/xml",
            description="The Finvoice 3.0 document this PDF shows",
            relationship="Source",
        )
    ]
    return pdfkit.render_pages(
        flow, meta, embedded=embedded, decorate=writer.footer, test_mark=test_mark
    )
