"""The receipt as a PDF (``service_pdf``), drawn from the receipt view model.

Two layouts: ``a4`` (default) and ``roll``, an 80 mm till roll whose page is exactly as tall as the
receipt (split into 200-inch pages only for very long receipts). Both carry everything the
receipt link page shows: merchant and branch, rows with discounts, custom attributes and journeys,
totals, the VAT table, payments, free text, attachments as scannable codes, and the OCMF
verification results. The receipt JSON is embedded as ``receipt.json`` (PDF/A-3 ``Data``).

Why one long module: one drawing method per receipt section, in page order, for both
layouts; the toolkit itself is ``pdfkit``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import assert_never

from kuitti import signatures
from kuitti.receipts.formats import pdfkit
from kuitti.receipts.formats.codes import Symbology, code_modules
from kuitti.receipts.formats.layout import Layout
from kuitti.receipts.formats.ocmf import VerificationResult
from kuitti.receipts.formats.pdfkit import (
    ACCENT,
    AMBER,
    BOLD,
    GREEN,
    GREY,
    MONO,
    RED,
    REGULAR,
    Block,
    EmbeddedFile,
    Flow,
    Metadata,
    wrap,
)
from kuitti.receipts.view import (
    AttachmentView,
    JourneyView,
    PaymentView,
    ReceiptView,
    RowView,
    VerificationView,
)

A4 = (595.28, 841.89)
ROLL_WIDTH = 226.77  # 80 mm


@dataclass(frozen=True, slots=True)
class Geometry:
    roll: bool
    body: float
    small: float
    title: float
    heading: float
    leading: float


GEOMETRY = {
    Layout.A4: Geometry(roll=False, body=9, small=7.5, title=15, heading=10, leading=1.32),
    Layout.ROLL: Geometry(roll=True, body=7.5, small=6.5, title=11, heading=8, leading=1.3),
}

RESULT_COLOR = {
    VerificationResult.VALID: GREEN,
    VerificationResult.INVALID: RED,
    VerificationResult.UNVERIFIABLE: AMBER,
}
RESULT_MARK = {
    VerificationResult.VALID: "✓",
    VerificationResult.INVALID: "✗",
    VerificationResult.UNVERIFIABLE: "?",
}


def _flow(layout: Layout) -> Flow:
    match layout:
        case Layout.A4:
            return Flow(
                page_width=A4[0],
                page_height=A4[1],
                margin_x=48,
                margin_top=46,
                margin_bottom=46,
            )
        case Layout.ROLL:
            return Flow(
                page_width=ROLL_WIDTH,
                page_height=pdfkit.MAX_PAGE_SIDE,
                margin_x=12,
                margin_top=16,
                margin_bottom=24,
            )
        case _:
            assert_never(layout)


@dataclass(frozen=True)
class SignedPart:
    """What a signed receipt's PDF carries of its signature."""

    saved: bytes
    """The receipt's ``signed_json``, embedded as ``signatures.SIGNED_FILE``."""
    issuer: str
    verify_url: str


class _Writer:
    def __init__(self, view: ReceiptView, layout: Layout, signed: SignedPart | None) -> None:
        self.view = view
        self.signed = signed
        self.g = GEOMETRY[layout]
        self.flow = _flow(layout)
        self.t = view.label

    # ---- small helpers ---------------------------------------------------------------------

    def step(self, size: float) -> float:
        return size * self.g.leading

    def paragraph(
        self,
        text: str,
        *,
        size: float | None = None,
        font: str = REGULAR,
        color: pdfkit.Color = pdfkit.BLACK,
        indent: float = 0.0,
        center: bool = False,
    ) -> None:
        size = size or self.g.body
        flow = self.flow
        for line in wrap(text, font, size, flow.width - indent):
            block = Block(height=self.step(size))
            if center:
                block.text(
                    flow.left + flow.width / 2, size, line, font, size, align="c", color=color
                )
            else:
                block.text(flow.left + indent, size, line, font, size, color=color)
            flow.place(block)

    def heading(self, text: str) -> None:
        g, flow = self.g, self.flow
        block = Block(height=self.step(g.heading) + 4)
        flow.space(g.body * 0.9)
        block.text(
            flow.left, g.heading, text.upper() if g.roll else text, BOLD, g.heading, color=ACCENT
        )
        block.line(flow.left, flow.right, self.step(g.heading) + 1, width=0.6, color=ACCENT)
        flow.place(block, gap_after=3, keep=60)

    def separator(self) -> None:
        block = Block(height=6)
        block.line(self.flow.left, self.flow.right, 3, width=0.4)
        self.flow.place(block)

    def key_values(
        self, pairs: tuple[tuple[str, str], ...], *, size: float, indent: float = 0.0
    ) -> None:
        for key, value in pairs:
            self.paragraph(f"{key}: {value}", size=size, color=GREY, indent=indent)

    # ---- sections ----------------------------------------------------------------------------

    def header(self) -> None:
        v, g, flow = self.view, self.g, self.flow
        m = v.merchant
        lines: list[tuple[str, str, float, pdfkit.Color]] = [(m.name, BOLD, g.title, pdfkit.BLACK)]
        if m.branch_name:
            lines.append((m.branch_name, REGULAR, g.body + 1, pdfkit.BLACK))
        if m.branch_sub_name:
            lines.append((m.branch_sub_name, REGULAR, g.small, GREY))
        for address in m.address_lines:
            lines.append((address, REGULAR, g.small, GREY))
        lines.append((f"{self.t('business_id')} {m.company_id}", REGULAR, g.small, GREY))
        for key, value in (("phone", m.phone), ("email", m.email), ("website", m.website)):
            if value:
                lines.append((f"{self.t(key)} {value}", REGULAR, g.small, GREY))
        details: list[tuple[str, str, float, pdfkit.Color]] = [
            (v.kind_label, BOLD, g.title, ACCENT),
            (f"{self.t('receipt_number')} {v.number}", REGULAR, g.body, pdfkit.BLACK),
            (v.time, REGULAR, g.body, pdfkit.BLACK),
        ]
        if m.branch_id or m.pos_id:
            parts = []
            if m.branch_id:
                parts.append(f"{self.t('branch')} {m.branch_id}")
            if m.pos_id:
                parts.append(f"{self.t('pos')} {m.pos_id}")
            details.append((" · ".join(parts), REGULAR, g.small, GREY))
        details.extend((line, BOLD, g.small, ACCENT) for line in v.relations)
        if g.roll:
            for text, font, size, color in [*lines, ("", REGULAR, 4, GREY), *details]:
                if text:
                    self.paragraph(text, size=size, font=font, color=color, center=True)
                else:
                    flow.space(size)
            self.separator()
            return
        left_width = flow.width * 0.6
        right_width = flow.width * 0.38
        block = Block()
        y = 0.0
        for text, font, size, color in lines:
            for line in wrap(text, font, size, left_width, max_lines=4):
                y += self.step(size)
                block.text(flow.left, y - size * 0.25, line, font, size, color=color)
        left_height = y
        y = 0.0
        for text, font, size, color in details:
            for line in wrap(text, font, size, right_width, max_lines=3):
                y += self.step(size)
                block.text(flow.right, y - size * 0.25, line, font, size, align="r", color=color)
        block.grow(max(left_height, y) + 8)
        block.line(flow.left, flow.right, block.height - 2, width=0.8, color=ACCENT)
        flow.place(block, gap_after=6)

    def continuation(self, flow: Flow) -> None:
        g = self.g
        block = Block(height=self.step(g.small) + 6)
        block.text(
            flow.left,
            g.small,
            self.view.title,
            REGULAR,
            g.small,
            color=GREY,
        )
        flow.place(block)

    # rows ------------------------------------------------------------------------------------

    def columns(self) -> tuple[float, float, float, float, float]:
        """Right edges of quantity, unit price, VAT and total; and the name column width."""
        f = self.flow
        total_r = f.right
        vat_r = total_r - 78
        price_r = vat_r - 46
        qty_r = price_r - 70
        return qty_r, price_r, vat_r, total_r, qty_r - 56 - f.left

    def rows_header(self, flow: Flow) -> None:
        g = self.g
        if g.roll:
            return
        qty_r, price_r, vat_r, total_r, _ = self.columns()
        block = Block(height=self.step(g.small) + 5)
        s = g.small
        block.text(flow.left, s, self.t("product"), BOLD, s, color=GREY)
        block.text(qty_r, s, self.t("quantity"), BOLD, s, align="r", color=GREY)
        block.text(price_r, s, self.t("unit_price"), BOLD, s, align="r", color=GREY)
        block.text(vat_r, s, self.t("vat_rate"), BOLD, s, align="r", color=GREY)
        block.text(total_r, s, self.t("row_total"), BOLD, s, align="r", color=GREY)
        block.line(flow.left, flow.right, self.step(s) + 2, width=0.5)
        flow.place(block)

    def row_details(self, row: RowView) -> list[tuple[str, str | None]]:
        """(text, amount) lines shown under a row in the small font."""
        details: list[tuple[str, str | None]] = []
        ids = [p for p in (f"EAN {row.ean}" if row.ean else None, row.product_id) if p]
        if ids:
            details.append((" · ".join(ids), None))
        if row.category or row.tags:
            parts = [p for p in (row.category, ", ".join(row.tags) if row.tags else None) if p]
            details.append((" · ".join(parts), None))
        if row.free_text:
            details.append((row.free_text, None))
        for key, value in row.custom_attributes:
            details.append((f"{key}: {value}", None))
        for discount in row.discounts:
            text = f"{self.t('discount')}: {discount.description}"
            if discount.percentage:
                text = f"{text} ({discount.percentage})"
            details.append((text, discount.amount))
        if row.journey is not None:
            details.extend((line, None) for line in self.journey_lines(row.journey))
        return details

    def journey_lines(self, journey: JourneyView) -> list[str]:
        lines = [" ".join(p for p in (journey.type_label, journey.id) if p) + f": {journey.route}"]
        for key, stop in (("departure", journey.origin), ("arrival", journey.destination)):
            parts = [p for p in (stop.name, stop.place, stop.time, stop.coordinates) if p]
            lines.append(f"{self.t(key)}: {', '.join(parts)}")
        facts = [
            f"{self.t(key)} {value}"
            for key, value in (
                ("distance", journey.distance),
                ("duration", journey.duration),
                ("co2", journey.co2),
            )
            if value
        ]
        if facts:
            lines.append(" · ".join(facts))
        for key, value in (
            ("vehicle", journey.vehicle),
            ("driver", journey.driver),
            ("pickup_arrived_at", journey.pickup_arrived_at),
        ):
            if value:
                lines.append(f"{self.t(key)}: {value}")
        return lines

    def row(self, row: RowView) -> None:
        g, flow = self.g, self.flow
        block = Block()
        b, s = g.body, g.small
        if g.roll:
            name_lines = wrap(row.name, REGULAR, b, flow.width, max_lines=6)
            y = 0.0
            for line in name_lines:
                y += self.step(b)
                block.text(flow.left, y - b * 0.25, line, REGULAR, b)
            y += self.step(b)
            block.cell(
                flow.left,
                y - b * 0.25,
                f"{row.quantity_with_unit} × {row.unit_price}  {row.vat_rates}",
                flow.width * 0.58,
                REGULAR,
                s,
                align="l",
                color=GREY,
            )
            block.cell(flow.right, y - b * 0.25, row.total, flow.width * 0.4, BOLD, b)
            detail_width = flow.width - 8
            detail_right = flow.right
            indent = flow.left + 8
        else:
            qty_r, price_r, vat_r, total_r, name_width = self.columns()
            name_lines = wrap(row.name, REGULAR, b, name_width, max_lines=6)
            y = self.step(b)
            block.text(flow.left, y - b * 0.25, name_lines[0], REGULAR, b)
            base = y - b * 0.25
            block.cell(qty_r, base, row.quantity_with_unit, 60, REGULAR, b)
            block.cell(price_r, base, row.unit_price, 64, REGULAR, b)
            block.cell(vat_r, base, row.vat_rates, 42, REGULAR, b)
            block.cell(total_r, base, row.total, 74, REGULAR, b)
            for line in name_lines[1:]:
                y += self.step(b)
                block.text(flow.left, y - b * 0.25, line, REGULAR, b)
            detail_width = name_width + (qty_r - flow.left - name_width) - 60
            detail_right = total_r
            indent = flow.left + 10
        for text, amount in self.row_details(row):
            for index, line in enumerate(wrap(text, REGULAR, s, detail_width, max_lines=8)):
                y += self.step(s)
                block.text(indent, y - s * 0.25, line, REGULAR, s, color=GREY)
                if amount and index == 0:
                    block.text(
                        detail_right, y - s * 0.25, amount, REGULAR, s, align="r", color=GREY
                    )
        block.grow(y + 3)
        block.line(flow.left, flow.right, y + 2, width=0.25)
        flow.place(block)

    def rows(self) -> None:
        pdfkit.table(
            self.flow,
            self.view.rows,
            self.row,
            header=self.rows_header,
            continuation=self.continuation,
        )

    # totals, VAT, payments ---------------------------------------------------------------------

    def totals(self) -> None:
        g, flow, totals = self.g, self.flow, self.view.totals
        widest = max(
            pdfkit.text_width(totals.incl_vat, BOLD, g.title - 2),
            pdfkit.text_width(totals.excl_vat, REGULAR, g.body),
        )
        label_r = flow.right - min(flow.width * 0.5, max(80 if g.roll else 110, widest + 14))
        value_width = flow.right - label_r - 10
        block = Block()
        y = 4.0
        for key, value in (("total_excl_vat", totals.excl_vat), ("total_vat", totals.vat)):
            y += self.step(g.body)
            block.text(label_r, y, self.t(key), REGULAR, g.body, align="r", color=GREY)
            block.cell(flow.right, y, value, value_width, REGULAR, g.body)
        y += self.step(g.title) + 2
        block.text(label_r, y, self.t("total"), BOLD, g.title - 2, align="r")
        block.cell(flow.right, y, totals.incl_vat, value_width, BOLD, g.title - 2)
        block.grow(y + 6)
        flow.place(block)

    def vat_table(self) -> None:
        g, flow = self.g, self.flow
        self.heading(self.t("vat_breakdown"))
        s = g.small if g.roll else g.body
        if g.roll:
            edges = [flow.left + flow.width * f for f in (0.5, 0.72, 1.0)]
            column = flow.width * 0.22
        else:
            fifth = flow.width / 5
            edges = [flow.left + fifth * (i + 2) for i in range(3)]
            column = fifth
        header = Block(height=self.step(s) + 2)
        header.text(flow.left, s, self.t("vat_rate"), BOLD, s, color=GREY)
        for edge, key in zip(edges, ("excl_vat", "vat_amount", "incl_vat"), strict=True):
            header.text(edge, s, self.t(key), BOLD, s, align="r", color=GREY)
        flow.place(header)
        for vat in self.view.vats:
            block = Block(height=self.step(s))
            rate = f"{vat.rate} ({vat.code})" if vat.code else vat.rate
            block.text(flow.left, s, rate, REGULAR, s)
            for edge, value in zip(edges, (vat.excl_vat, vat.vat, vat.incl_vat), strict=True):
                block.cell(edge, s, value, column - 6, REGULAR, s)
            flow.place(block)

    def payment(self, payment: PaymentView) -> None:
        g, flow = self.g, self.flow
        b, s = g.body, g.small
        block = Block(height=self.step(b))
        title = payment.label
        if payment.masked_pan:
            title = f"{title} {payment.masked_pan}"
        width = flow.width - pdfkit.text_width(payment.amount, BOLD, b) - 8
        block.text(flow.left, b, pdfkit.ellipsize(title, BOLD, b, width), BOLD, b)
        block.text(flow.right, b, payment.amount, BOLD, b, align="r")
        flow.place(block)
        if payment.details:
            text = " · ".join(f"{k} {v}" for k, v in payment.details)
            self.paragraph(text, size=s, color=GREY, indent=8)
        self.key_values(payment.custom_attributes, size=s, indent=8)
        if payment.terminal_text:
            mono = s - 0.5
            for line in wrap(payment.terminal_text, MONO, mono, flow.width - 16, max_lines=120):
                block = Block(height=self.step(mono))
                block.text(flow.left + 12, mono, line, MONO, mono)
                flow.place(block)
        flow.space(3)

    def payments(self) -> None:
        if not self.view.payments:
            return
        self.heading(self.t("payments"))
        for payment in self.view.payments:
            self.payment(payment)

    def texts(self) -> None:
        v = self.view
        if v.free_text:
            self.flow.space(self.g.body)
            self.paragraph(v.free_text, center=self.g.roll)
        if v.custom_attributes:
            self.heading(self.t("details"))
            self.key_values(v.custom_attributes, size=self.g.body)

    # attachments -------------------------------------------------------------------------------

    def attachment(self, attachment: AttachmentView) -> None:
        g, flow = self.g, self.flow
        b, s = g.body, g.small
        modules = (
            code_modules(attachment.symbology, attachment.data)
            if attachment.symbology is not Symbology.NONE
            else None
        )
        code_width = code_height = 0.0
        module = 1.0
        if modules is not None:
            if modules.linear:
                module = min(1.2, (flow.width * (1.0 if g.roll else 0.5)) / modules.width)
            else:
                module = max(1.0, min(3.0, (110 if g.roll else 130) / modules.width))
                module = min(module, flow.width / modules.width)
            code_width = modules.width * module
            code_height = modules.total_height * module
        lines: list[tuple[str, str, float, pdfkit.Color]] = [
            (f"{attachment.kind_label}: {attachment.title}", BOLD, b, ACCENT)
        ]
        if attachment.description:
            lines.append((attachment.description, REGULAR, s, pdfkit.BLACK))
        if attachment.valid_until:
            lines.append(
                (f"{self.t('valid_until')} {attachment.valid_until}", REGULAR, s, pdfkit.BLACK)
            )
        lines.append(
            (
                f"{attachment.symbology.value if modules else self.t('code_not_encodable')}",
                REGULAR,
                s,
                GREY,
            )
        )
        block = Block()
        if g.roll:
            text_x, text_width = flow.left, flow.width
            y = 0.0
        else:
            text_x = flow.left + code_width + 14
            text_width = flow.right - text_x
            y = 0.0
        text_block: list[tuple[float, str, str, float, pdfkit.Color]] = []
        for text, font, size, color in lines:
            for line in wrap(text, font, size, text_width, max_lines=10):
                y += self.step(size)
                text_block.append((y - size * 0.25, line, font, size, color))
        data_lines = wrap(attachment.data, MONO, s, text_width, max_lines=12)
        for line in data_lines:
            y += self.step(s)
            text_block.append((y - s * 0.25, line, MONO, s, pdfkit.BLACK))
        if g.roll:
            for baseline, line, font, size, color in text_block:
                block.text(text_x, baseline, line, font, size, color=color)
            if modules is not None:
                block.code(modules, flow.left + (flow.width - code_width) / 2, y + 4, module)
                y += code_height + 6
            block.grow(y + 8)
        else:
            for baseline, line, font, size, color in text_block:
                block.text(text_x, baseline, line, font, size, color=color)
            if modules is not None:
                block.code(modules, flow.left, 0, module)
            block.grow(max(y, code_height) + 10)
        flow.place(block)

    def attachments(self) -> None:
        if not self.view.attachments:
            return
        self.heading(self.t("attachments"))
        for attachment in self.view.attachments:
            self.attachment(attachment)

    # signature ---------------------------------------------------------------------------------

    def signature(self, signed: SignedPart) -> None:
        """The receipt's signature: who signed it, and a QR code of the page that checks it."""
        g, flow = self.g, self.flow
        self.heading(self.t("signature"))
        modules = code_modules(Symbology.QR, signed.verify_url)
        assert modules is not None  # a short URL always fits
        module = min(2.0, flow.width / modules.width)
        size = modules.width * module
        text_x = flow.left if g.roll else flow.left + size + 14
        width = flow.right - text_x
        lines = [
            (f"{self.t('signature.by')} {signed.issuer}", BOLD, g.body),
            (self.t("signature.how"), REGULAR, g.small),
            (signed.verify_url, MONO, g.small),
        ]
        block = Block()
        y = 0.0
        for text, font, font_size in lines:
            for line in wrap(text, font, font_size, width, max_lines=4):
                y += self.step(font_size)
                block.text(text_x, y - font_size * 0.25, line, font, font_size)
        if g.roll:
            block.code(modules, flow.left + (flow.width - size) / 2, y + 4, module)
            y += modules.total_height * module + 6
        else:
            block.code(modules, flow.left, 0, module)
            y = max(y, modules.total_height * module)
        block.grow(y + 8)
        flow.place(block)

    # verifications -----------------------------------------------------------------------------

    def verification(self, verification: VerificationView) -> None:
        g, flow = self.g, self.flow
        b, s = g.body, g.small
        self.paragraph(
            f"{verification.type} {verification.version} · {self.t('transaction')} "
            f"{verification.transaction_id} · {verification.current_type}",
            size=s,
            color=GREY,
        )
        color = RESULT_COLOR[verification.result]
        self.paragraph(
            f"{RESULT_MARK[verification.result]} {verification.result_label}",
            size=b + 1,
            font=BOLD,
            color=color,
        )
        if verification.energy:
            self.paragraph(f"{self.t('energy')}: {verification.energy}", size=b, font=BOLD)
        for record in verification.records:
            head = f"{record.event_label}: {record.result_label}"
            if record.meter:
                head = f"{head} · {self.t('meter')} {record.meter}"
            self.paragraph(head, size=s, color=RESULT_COLOR[record.result])
            if record.reason:
                self.paragraph(record.reason, size=s, color=GREY, indent=8)
            for reading in record.readings:
                parts = [p for p in (reading.kind_label, reading.time, reading.value) if p]
                if reading.status:
                    parts.append(f"({reading.status})")
                self.paragraph("  ".join(parts), size=s, indent=8)
        self.paragraph(verification.note, size=s - 0.5, color=GREY)
        flow.space(4)

    def verifications(self) -> None:
        if not self.view.verifications:
            return
        self.heading(self.t("verifications"))
        for verification in self.view.verifications:
            self.verification(verification)

    def build(self) -> Flow:
        self.flow.on_new_page = self.continuation
        self.header()
        self.rows()
        self.totals()
        self.vat_table()
        self.payments()
        self.texts()
        self.attachments()
        self.verifications()
        if self.signed is not None:
            self.signature(self.signed)
        return self.flow


def render_service_pdf(
    view: ReceiptView,
    *,
    layout: Layout = Layout.A4,
    document_json: bytes,
    identity: str,
    test_mark: bool = False,
    signed: SignedPart | None = None,
) -> bytes:
    """The receipt PDF for ``view``; ``document_json`` is embedded as ``receipt.json``, and a
    signed receipt's saved form as ``receipt.signed.json`` beside a QR code of the page that
    checks it. ``test_mark``: a sandbox receipt, marked TEST on every page."""
    flow = _Writer(view, layout, signed).build()
    created = view.receipt_time
    meta = Metadata(
        title=view.title,
        author=view.merchant.name,
        subject=f"{view.kind_label} {view.number}",
        created=created,
        identity=identity,
        keywords=f"receipt {view.number}",
        language=view.locale.value,
    )
    embedded = [
        EmbeddedFile(
            name="receipt.json",
            content=document_json,
            mime="application/json",
            description="The receipt document (JSON) this PDF shows",
        )
    ]
    if signed is not None:
        embedded.append(
            EmbeddedFile(
                name=signatures.SIGNED_FILE,
                content=signed.saved,
                mime="application/jose+json",
                description="The receipt and its signature (JWS): verify it anywhere",
            )
        )
    title = view.title

    def footer(number: int, total: int) -> str:
        return f"{title} · {view.label('page')} {number} / {total}"

    return pdfkit.render_pages(
        flow,
        meta,
        embedded=embedded,
        footer=footer,
        fit_height=layout is Layout.ROLL,
        test_mark=test_mark,
    )
