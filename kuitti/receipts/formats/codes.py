"""QR codes and barcodes of receipt attachments, as SVG (pages), PNG and PDF vector drawings.

The symbology follows the data: ``QRCODE`` is a QR code (segno, never a Micro QR, error level M).
``BARCODE`` is EAN-13 or EAN-8 when the data is 13 or 8 digits with a valid check digit, otherwise
Code 128 (python-barcode computes the modules). Data that Code 128 cannot carry (anything but
printable ASCII, or more than ``MAX_CODE128_CHARS``) is shown as a QR code instead, since a
customer must still be able to scan it; data too long even for a QR code is shown as text only
(``Symbology.NONE``).

All three outputs are drawn from one module matrix, so the page and the PDF show the same code.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from typing import Any

import barcode
import segno

QR_QUIET_MODULES = 4
LINEAR_QUIET_MODULES = 10
LINEAR_HEIGHT_MODULES = 50
MAX_CODE128_CHARS = 48


class Symbology(StrEnum):
    QR = "QR"
    EAN13 = "EAN-13"
    EAN8 = "EAN-8"
    CODE128 = "Code 128"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class CodeModules:
    """Dark/light modules without quiet zone: one row for a linear code, a square for QR."""

    symbology: Symbology
    rows: tuple[str, ...]
    quiet: int
    height: int

    @property
    def linear(self) -> bool:
        return self.symbology is not Symbology.QR

    @property
    def width(self) -> int:
        return len(self.rows[0]) + 2 * self.quiet

    @property
    def total_height(self) -> int:
        return self.height + (2 * self.quiet if not self.linear else 0)


def ean_check_valid(digits: str) -> bool:
    """True for a GS1 number (EAN-8, EAN-13) whose last digit is its check digit."""
    if not digits.isascii() or not digits.isdigit() or len(digits) not in (8, 13):
        return False
    body = [int(c) for c in digits[:-1]]
    # Weights 3,1,3,… counted from the digit next to the check digit.
    total = sum(d * (3 if i % 2 == 0 else 1) for i, d in enumerate(reversed(body)))
    return (10 - total % 10) % 10 == int(digits[-1])


def _code128_ok(data: str) -> bool:
    return 0 < len(data) <= MAX_CODE128_CHARS and all(32 <= ord(c) <= 126 for c in data)


def choose_symbology(kind: str, data: str) -> Symbology:
    """The symbology for an attachment of ``kind`` (``BARCODE`` or ``QRCODE``) carrying ``data``."""
    if kind == "BARCODE":
        if ean_check_valid(data):
            return Symbology.EAN13 if len(data) == 13 else Symbology.EAN8
        if _code128_ok(data):
            return Symbology.CODE128
    return Symbology.QR if code_modules(Symbology.QR, data) is not None else Symbology.NONE


@lru_cache(maxsize=512)
def code_modules(symbology: Symbology, data: str) -> CodeModules | None:
    """The module matrix for ``data``, or None when it cannot be encoded."""
    match symbology:
        case Symbology.QR:
            try:
                qr = segno.make_qr(data, error="m", boost_error=False)
            except (segno.DataOverflowError, ValueError):
                return None
            rows = tuple("".join("1" if m else "0" for m in row) for row in qr.matrix)
            return CodeModules(symbology, rows, QR_QUIET_MODULES, len(rows))
        case Symbology.EAN13 | Symbology.EAN8 | Symbology.CODE128:
            if symbology is Symbology.CODE128:
                if not _code128_ok(data):
                    return None
                code: Any = barcode.Code128(data)
            elif not ean_check_valid(data):
                return None
            elif symbology is Symbology.EAN13:
                code = barcode.EAN13(data)
            else:
                code = barcode.EAN8(data)
            pattern = "".join(code.build())
            return CodeModules(symbology, (pattern,), LINEAR_QUIET_MODULES, LINEAR_HEIGHT_MODULES)
        case Symbology.NONE:
            return None


def _runs(row: str) -> list[tuple[int, int]]:
    """(start, length) of each run of dark modules."""
    runs: list[tuple[int, int]] = []
    start = -1
    for i, module in enumerate(row):
        if module == "1":
            if start < 0:
                start = i
        elif start >= 0:
            runs.append((start, i - start))
            start = -1
    if start >= 0:
        runs.append((start, len(row) - start))
    return runs


def svg(symbology: Symbology, data: str, *, scale: int = 4, title: str | None = None) -> str | None:
    """An inline SVG of the code (no XML declaration), or None if it cannot be encoded.

    Sized ``scale`` CSS pixels per module and scalable through its ``viewBox``."""
    modules = code_modules(symbology, data)
    if modules is None:
        return None
    q = modules.quiet
    parts: list[str] = []
    if modules.linear:
        for start, length in _runs(modules.rows[0]):
            parts.append(f"M{start + q} 0h{length}v{modules.height}h-{length}z")
    else:
        for y, row in enumerate(modules.rows):
            for start, length in _runs(row):
                parts.append(f"M{start + q} {y + q}h{length}v1h-{length}z")
    width, height = modules.width, modules.total_height
    label = _escape(title or f"{symbology.value}: {data}")
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="{width * scale}" height="{height * scale}" role="img" aria-label="{label}" '
        f'shape-rendering="crispEdges"><title>{label}</title>'
        f'<rect width="{width}" height="{height}" fill="#fff"/>'
        f'<path fill="#000" d="{"".join(parts)}"/></svg>'
    )


def _escape(text: str) -> str:
    return (
        text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    )


def png(symbology: Symbology, data: str, *, scale: int = 4) -> bytes | None:
    """A greyscale PNG of the code with its quiet zone, ``scale`` pixels per module."""
    modules = code_modules(symbology, data)
    if modules is None:
        return None
    scale = max(1, min(scale, 20))
    q = modules.quiet
    light, dark = b"\xff", b"\x00"
    lines: list[bytes] = []
    if modules.linear:
        padded = "0" * q + modules.rows[0] + "0" * q
        line = b"".join((dark if m == "1" else light) * scale for m in padded)
        lines = [line] * (modules.height * scale)
        # quiet rows above and below help decoders find the bars
        blank = light * len(line)
        lines = [blank] * (q * scale) + lines + [blank] * (q * scale)
    else:
        blank = light * (modules.width * scale)
        lines.extend([blank] * (q * scale))
        for row in modules.rows:
            padded = "0" * q + row + "0" * q
            line = b"".join((dark if m == "1" else light) * scale for m in padded)
            lines.extend([line] * scale)
        lines.extend([blank] * (q * scale))
    width, height = len(lines[0]), len(lines)
    raw = b"".join(b"\x00" + line for line in lines)

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body))
            + kind
            + body
            + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw, 6))
        + chunk(b"IEND", b"")
    )


def draw(canvas: Any, modules: CodeModules, x: float, y: float, module_size: float) -> None:
    """Draw ``modules`` on a reportlab canvas as vector rectangles, quiet zone included, with
    the lower-left corner at (x, y).

    The rectangles are written in module units under one scaling transform, so every
    coordinate is a small integer: the content stream stays compact and fast to write."""
    q = modules.quiet
    ops: list[str] = []
    if modules.linear:
        height = modules.height
        for start, length in _runs(modules.rows[0]):
            ops.append(f"{start + q} 0 {length} {height} re")
    else:
        size = len(modules.rows)
        for row_index, row in enumerate(modules.rows):
            bottom = size + q - row_index - 1
            for start, length in _runs(row):
                ops.append(f"{start + q} {bottom} {length} 1 re")
    canvas.saveState()
    canvas.transform(module_size, 0, 0, module_size, x, y)
    canvas.setFillColorRGB(0, 0, 0)
    canvas.addLiteral(" ".join(ops) + " f")
    canvas.restoreState()
