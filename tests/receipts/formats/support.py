"""Receipts that exercise every part of the document, real OCMF records, and the tools that read
rendered output back: the Finvoice XSD, pypdf, poppler's pdftoppm and zxing-cpp."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import httpx
import zxingcpp
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from lxml import etree
from PIL import Image
from pypdf import PdfReader

from kuitti.receipts.formats.finvoice_xml import FINVOICE_SCHEMA_PATH
from kuitti.services import Services
from tests.factories import auth, card_payment, make_partner, product_row, receipt_doc

REPO = Path(__file__).resolve().parents[3]
FINVOICE_XSD = FINVOICE_SCHEMA_PATH
ARTIFACTS = REPO / "test-artifacts" / "formats"
IBAN = "FI2112345600000785"
BIC = "NDEAFIHH"
LIST = "/api/v1/receipts/"


@lru_cache(maxsize=1)
def finvoice_schema() -> etree.XMLSchema:
    return etree.XMLSchema(etree.parse(str(FINVOICE_XSD)))


def assert_valid_finvoice(xml: bytes) -> etree._Element:
    """Parse the bytes (not a decoded string) and validate against the official XSD."""
    root = etree.fromstring(xml)
    schema = finvoice_schema()
    assert schema.validate(root), schema.error_log
    return root


# --- OCMF ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class OcmfKey:
    private: ec.EllipticCurvePrivateKey
    public_hex: str
    public_base64: str


def ocmf_key(curve: ec.EllipticCurve | None = None) -> OcmfKey:
    import base64

    private = ec.generate_private_key(curve or ec.SECP256R1())
    der = private.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return OcmfKey(private, der.hex().upper(), base64.b64encode(der).decode())


def ocmf_payload(start: str = "1234.500", end: str = "1246.845") -> str:
    # Written by hand, not json.dumps: the signed bytes are exactly these characters.
    return (
        '{"FV":"1.0","GI":"KUITTI TEST","GS":"GW-1","GV":"1.0","PG":"T1",'
        '"MV":"Example Meters","MM":"EM-1","MS":"METER-0042","MF":"1.0",'
        '"IS":true,"IL":"VERIFIED","IF":["RFID_PLAIN"],"IT":"ISO14443","ID":"04A1B2C3",'
        '"CT":"EVSEID","CI":"FI*KUI*E0001",'
        '"RD":[{"TM":"2026-01-15T13:10:00,000+0200 S","TX":"B","RV":' + start + ","
        '"RI":"1-b:1.8.0","RU":"kWh","RT":"AC","EF":"","ST":"G"},'
        '{"TM":"2026-01-15T13:55:00,000+0200 S","TX":"E","RV":' + end + ","
        '"RI":"1-b:1.8.0","RU":"kWh","RT":"AC","EF":"","ST":"G"}]}'
    )


def ocmf_record(key: OcmfKey, payload: str | None = None, *, encoding: str = "hex") -> str:
    import base64

    payload = payload or ocmf_payload()
    signature = key.private.sign(payload.encode(), ec.ECDSA(hashes.SHA256()))
    encoded = signature.hex() if encoding == "hex" else base64.b64encode(signature).decode()
    sig = {"SA": "ECDSA-secp256r1-SHA256", "SD": encoded}
    if encoding != "hex":
        sig["SE"] = encoding
    return f"OCMF|{payload}|{json.dumps(sig, separators=(',', ':'))}"


def verification(key: OcmfKey, *, end_record: str | None = None) -> dict[str, Any]:
    return {
        "type": "OCMF",
        "version": "1.0",
        "publicKey": key.public_hex,
        "transactionId": "TX-2026-0042",
        "currentType": "DC",
        "transactionEnd": {"signedData": end_record or ocmf_record(key)},
    }


# --- documents ----------------------------------------------------------------------------

QR_DATA = "https://kuitti.example/t/9f1c2b"
EAN13_DATA = "6412345678907"
EAN8_DATA = "96385074"
CODE128_DATA = "RET-2026-0001"


def rich_doc(key: OcmfKey | None = None) -> dict[str, Any]:
    """A receipt with every optional field: discounts, categories, custom attributes, a journey,
    a product with two VAT rates, several payments, attachments and an OCMF verification."""
    coffee = product_row(
        "Kahvi Presidentti 500 g",
        unit_price=599,
        quantity=2,
        rate="14",
        EANCode="6412345678907",
        productId="1001",
        freeText="Tarjous viikolla 3",
        categorization={"main": "10", "product": "1001", "sub": 7, "tags": ["leimakortti"]},
        customAttributes=[{"Paahtoaste": "3"}],
    )
    # A discount: the row total is what the customer pays after it.
    discounted = product_row("Sateenvarjo", unit_price=1590, rate="25.5")
    discounted["unitPriceIncVAT"] = 1990
    discounted["discounts"] = [
        {"amount": 400, "percentage": "20.1", "description": "Kanta-asiakasetu"}
    ]
    taxi = product_row(
        "Taksimatka",
        unit_price=4350,
        rate="14",
        journey={
            "type": "TAXI",
            "id": "T-99",
            "distance": 18250,
            "duration": 27,
            "CO2Emissions": 2150,
            "origin": {
                "name": "Rautatieasema",
                "city": "Helsinki",
                "country": "FI",
                "latitude": "60.1719",
                "longitude": "24.9414",
                "datetime": "2026-01-15T13:30:00+02:00",
            },
            "destination": {
                "name": "Lentoasema T2",
                "city": "Vantaa",
                "datetime": "2026-01-15T13:57:00+02:00",
            },
            "vehicle": {
                "id": "V-12",
                "licensePlate": "ABC-123",
                "make": "Toyota",
                "model": "Prius",
                "category": "SEDAN",
                "powertrain": "HYBRID",
            },
            "driver": {"id": "D-7"},
            "pickupArrivedAt": "2026-01-15T13:28:00+02:00",
        },
    )
    gift = product_row("Lahjapaketti", unit_price=1000, rate="25.5")
    mixed_part = product_row("x", unit_price=500, rate="14")["vats"][0]
    gift["vats"].append(mixed_part)
    gift["totalAmountExcVAT"] += mixed_part["totalAmountExcVAT"]
    gift["totalAmountIncVAT"] += mixed_part["totalAmountIncVAT"]
    gift["unitPriceIncVAT"] = gift["totalAmountIncVAT"]
    charging = product_row(
        "Latausenergia", unit_price=35, quantity=12, rate="25.5", quantityCode="kWh"
    )
    charging["quantity"] = "12.345"
    rows = [coffee, discounted, taxi, gift, charging]
    doc = receipt_doc(rows, payments=False)
    total = doc["totalPriceIncVAT"]
    doc["payments"] = [
        card_payment(
            total - 500,
            transactionRawText="VISA DEBIT\nAID: A0000000031010\nVARMENNUS A1B2C3\nOSTO  EUR",
        ),
        {"type": "CASH", "amount": 500, "attributes": {"handedAmount": 1000}},
    ]
    doc["merchant"]["branch"].update(
        subName="Aina auki",
        email="kamppi@kauppa.example",
        phone="+358 9 123 4567",
        websiteURL="https://kauppa.example/",
    )
    doc["freeText"] = "Kiitos käynnistä! Tervetuloa uudelleen."
    doc["customAttributes"] = [{"Asiakasnumero": "A-12345"}]
    doc["attachments"] = [
        {
            "type": "QRCODE",
            "kind": "TICKET",
            "title": "Pääsylippu",
            "data": QR_DATA,
            "description": "Näytä ovella",
            "validUntil": "2026-02-28T23:59:59+02:00",
        },
        {"type": "BARCODE", "kind": "VOUCHER", "title": "Etuseteli", "data": EAN13_DATA},
        {"type": "BARCODE", "kind": "VOUCHER", "title": "Pieni etu", "data": EAN8_DATA},
        {"type": "BARCODE", "kind": "RETURN", "title": "Palautuskoodi", "data": CODE128_DATA},
    ]
    if key is not None:
        doc["verifications"] = [verification(key)]
    return doc


def minimal_doc() -> dict[str, Any]:
    """Only what the interface requires: no branch, no payments, no optional row fields."""
    row = product_row("Kahvi")
    return {
        "merchant": {"name": "Pikku Oy", "companyID": "7654321-2"},
        "products": [row],
        "vats": [
            {
                "VATRate": "14",
                "totalVATAmount": row["vats"][0]["VATAmount"],
                "totalAmountExcVAT": row["totalAmountExcVAT"],
                "totalAmountIncVAT": row["totalAmountIncVAT"],
            }
        ],
        "receiptNumber": "1",
        "receiptTimeStamp": "2026-01-15T14:03:00+02:00",
        "currencyISOCode": "EUR",
        "totalVATAmount": row["vats"][0]["VATAmount"],
        "totalPriceExcVAT": row["totalAmountExcVAT"],
        "totalPriceIncVAT": row["totalAmountIncVAT"],
    }


# --- HTTP ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Poster:
    api_key: str


def poster(services: Services, *, iban: bool = True, name: str = "Kauppa Oy") -> Poster:
    options: dict[str, Any] = {"attachments": True}
    if iban:
        options.update(iban=IBAN, bic=BIC)
    return Poster(make_partner(services, name=name, **options).api_key)


def post(client: httpx.Client, who: Poster, doc: dict[str, Any]) -> str:
    response = client.post(LIST, json=doc, headers=auth(who.api_key))
    assert response.status_code == 200, response.text
    receipt_id: str = response.json()["receipt_id"]
    return receipt_id


def fetch(
    client: httpx.Client,
    who: Poster,
    receipt_id: str,
    fmt: str,
    *,
    params: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    return client.get(
        f"{LIST}{receipt_id}/{fmt}/",
        params=params,
        headers={**auth(who.api_key), **(headers or {})},
    )


# --- reading PDFs back ----------------------------------------------------------------------


def pdf_text(content: bytes) -> str:

    reader = PdfReader(io.BytesIO(content))
    return "\n".join(page.extract_text() or "" for page in reader.pages)


def pdf_pages_png(content: bytes, name: str, *, dpi: int = 110) -> list[Path]:
    """Pages rendered by poppler into test-artifacts/formats/<name>-<n>.png."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    source = ARTIFACTS / f"{name}.pdf"
    source.write_bytes(content)
    for old in ARTIFACTS.glob(f"{name}-*.png"):
        old.unlink()
    pdftoppm = shutil.which("pdftoppm")
    assert pdftoppm, "poppler-utils (pdftoppm) is needed"
    subprocess.run(
        [pdftoppm, "-r", str(dpi), "-png", str(source), str(ARTIFACTS / name)],
        check=True,
        timeout=60,
    )
    return sorted(ARTIFACTS.glob(f"{name}-*.png"))


def decoded_codes(images: list[Path]) -> Iterator[tuple[str, str]]:
    """(format name, text) of every barcode and QR code zxing-cpp finds in the images."""
    for path in images:
        with Image.open(path) as image:
            for result in zxingcpp.read_barcodes(image):
                yield result.format.name, result.text
