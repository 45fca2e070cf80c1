"""Attachment codes: the symbology follows the data, and every output scans back (zxing-cpp)."""

from __future__ import annotations

import io

import pytest
import zxingcpp
from lxml import etree
from PIL import Image

from kuitti.receipts.formats.codes import (
    Symbology,
    choose_symbology,
    code_modules,
    ean_check_valid,
    png,
    svg,
)


def scan(content: bytes) -> list[tuple[str, str]]:
    with Image.open(io.BytesIO(content)) as image:
        return [(r.format.name, r.text) for r in zxingcpp.read_barcodes(image)]


class TestSymbology:
    @pytest.mark.parametrize(
        ("kind", "data", "expected"),
        [
            ("BARCODE", "6412345678907", Symbology.EAN13),
            ("BARCODE", "96385074", Symbology.EAN8),
            ("BARCODE", "6412345678901", Symbology.CODE128),  # wrong check digit
            ("BARCODE", "1234", Symbology.CODE128),
            ("BARCODE", "RET-2026-0001", Symbology.CODE128),
            ("BARCODE", "Palautus ÄÖ", Symbology.QR),  # not Code 128 material
            ("BARCODE", "X" * 100, Symbology.QR),  # too long for a scannable Code 128
            ("QRCODE", "6412345678907", Symbology.QR),
            ("QRCODE", "🎉" * 2000, Symbology.NONE),  # beyond a QR code's capacity
        ],
    )
    def test_choice(self, kind: str, data: str, expected: Symbology) -> None:
        assert choose_symbology(kind, data) is expected

    def test_ean_check_digit(self) -> None:
        assert ean_check_valid("6412345678907")
        assert ean_check_valid("96385074")
        assert not ean_check_valid("6412345678900")
        assert not ean_check_valid("641234567890a")

    def test_qr_is_never_micro(self) -> None:
        modules = code_modules(Symbology.QR, "1")
        assert modules is not None
        assert len(modules.rows) >= 21


class TestOutputs:
    @pytest.mark.parametrize(
        ("symbology", "data", "name"),
        [
            (Symbology.QR, "https://kuitti.example/t/1?ä=😀", "QRCode"),
            (Symbology.EAN13, "6412345678907", "EAN13"),
            (Symbology.EAN8, "96385074", "EAN8"),
            (Symbology.CODE128, "RET-2026-0001", "Code128"),
        ],
    )
    def test_png_scans(self, symbology: Symbology, data: str, name: str) -> None:
        content = png(symbology, data, scale=3)
        assert content is not None
        assert scan(content) == [(name, data)]

    def test_svg_is_well_formed_and_labelled(self) -> None:
        picture = svg(Symbology.EAN13, "6412345678907", title='Etu <"10 %">')
        assert picture is not None
        root = etree.fromstring(picture.encode())
        assert root.get("role") == "img"
        assert root.get("aria-label") == 'Etu <"10 %">'
        assert root.find("{http://www.w3.org/2000/svg}path") is not None

    def test_unencodable_gives_none(self) -> None:
        assert svg(Symbology.EAN13, "123") is None
        assert png(Symbology.CODE128, "ä") is None
        assert png(Symbology.NONE, "x") is None
