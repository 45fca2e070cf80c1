"""Plain typed functions that build test data. Receipts come out internally consistent (the
arithmetic the validator checks holds), so a test changes only what it is about."""

from __future__ import annotations

import copy
import hashlib
import json
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import httpx
from sqlalchemy import text
from sqlalchemy.orm import Session

from kuitti.ids import new_id
from kuitti.models import Connection, PartnerRole, Receipt, ReceiptGrant, User
from kuitti.models.receipts import GrantReason
from kuitti.partners.service import NewPartner, create_partner
from kuitti.security import SecretBox
from kuitti.services import Services
from kuitti.users.service import create_user

VAT_RATES = ("25.5", "14", "10")


def product_row(
    name: str = "Kahvi 500 g",
    *,
    unit_price: int = 599,
    quantity: int = 1,
    rate: str = "14",
    **extra: Any,
) -> dict[str, Any]:
    """One product row; VAT is split out of the VAT-inclusive price exactly, in cents."""
    inc = unit_price * quantity
    rate_hundredths = int(Decimal(rate) * 100)
    exc = (inc * 10000 + (10000 + rate_hundredths) // 2) // (10000 + rate_hundredths)
    row: dict[str, Any] = {
        "name": name,
        "quantity": str(quantity),
        "quantityCode": "pcs",
        "unitPriceIncVAT": unit_price,
        "totalAmountExcVAT": exc,
        "totalAmountIncVAT": inc,
        "vats": [
            {
                "VATRate": rate,
                "VATAmount": inc - exc,
                "totalAmountExcVAT": exc,
                "totalAmountIncVAT": inc,
            }
        ],
    }
    row.update(extra)
    return row


def card_payment(amount: int, **attributes: Any) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "transactionType": "PURCHASE",
        "currencyISOCode": "EUR",
        "MID": "MID-000123",
        "timeStamp": "2026-01-15T14:03:11+02:00",
        "terminalId": "T-77",
        "referenceNumber": "260115140311",
        "authorizationCode": "A1B2C3",
        "transactionId": "tx-0001",
        "maskedPAN": "415301******1234",
        "cardNetwork": "VISA",
        "cardType": "DEBIT",
    }
    attrs.update(attributes)
    return {"type": "CARD", "amount": amount, "attributes": attrs}


def receipt_doc(
    rows: list[dict[str, Any]] | None = None,
    *,
    payments: list[dict[str, Any]] | bool | None = True,
    **extra: Any,
) -> dict[str, Any]:
    """A valid receipt document. ``payments=True`` pays the total with one card payment."""
    rows = rows if rows is not None else [product_row(), product_row("Pulla", unit_price=250)]
    vats: dict[str, dict[str, Any]] = {}
    for row in rows:
        for part in row["vats"]:
            vat = vats.setdefault(
                part["VATRate"],
                {
                    "VATRate": part["VATRate"],
                    "totalVATAmount": 0,
                    "totalAmountExcVAT": 0,
                    "totalAmountIncVAT": 0,
                },
            )
            vat["totalVATAmount"] += part["VATAmount"]
            vat["totalAmountExcVAT"] += part["totalAmountExcVAT"]
            vat["totalAmountIncVAT"] += part["totalAmountIncVAT"]
    total_inc = sum(v["totalAmountIncVAT"] for v in vats.values())
    doc: dict[str, Any] = {
        "type": "PURCHASE",
        "merchant": {
            "name": "Kauppa Oy",
            "companyID": "1234567-8",
            "branch": {
                "id": "001",
                "posId": "POS-1",
                "name": "Kauppa Kamppi",
                "address": {
                    "streetAddress": "Urho Kekkosen katu 1",
                    "city": "Helsinki",
                    "zipCode": "00100",
                    "country": "FI",
                },
            },
        },
        "products": rows,
        "vats": list(vats.values()),
        "receiptNumber": "R-2026-0001",
        "receiptTimeStamp": "2026-01-15T14:03:00+02:00",
        "currencyISOCode": "EUR",
        "totalVATAmount": sum(v["totalVATAmount"] for v in vats.values()),
        "totalPriceExcVAT": sum(v["totalAmountExcVAT"] for v in vats.values()),
        "totalPriceIncVAT": total_inc,
    }
    if payments is True:
        doc["payments"] = [card_payment(total_inc)]
    elif isinstance(payments, list):
        doc["payments"] = payments
    doc.update(extra)
    return doc


def many_rows(count: int) -> list[dict[str, Any]]:
    return [
        product_row(f"Tuote {i}", unit_price=100 + i * 7, quantity=1 + i % 3, rate=VAT_RATES[i % 3])
        for i in range(count)
    ]


def token_body(doc: dict[str, Any], *tokens: dict[str, Any]) -> dict[str, Any]:
    return {"attributes": {"tokens": list(tokens)}, "receipt": copy.deepcopy(doc)}


def make_partner(
    services: Services,
    *roles: PartnerRole,
    name: str = "Kauppa Oy",
    **options: Any,
) -> NewPartner:
    """A partner with the given roles (merchant by default); secrets in the result."""
    box = SecretBox(services.settings.resolved_secret_key)
    with services.db.session() as session:
        return create_partner(
            session,
            box,
            name=name,
            roles=list(roles) or [PartnerRole.MERCHANT],
            now=services.clock.now(),
            allow_insecure_webhooks=True,
            **options,
        )


def make_user(
    services: Services, email: str = "maija@example.com", password: str = "correct horse 1"
) -> User:
    with services.db.session() as session:
        return create_user(session, email, password, now=services.clock.now(), verified=True)


def auth(api_key: str) -> dict[str, str]:
    return {"Authorization": f"Token {api_key}"}


def unsaved_receipt(doc: dict[str, Any], *, ensure_ascii: bool = True) -> Receipt:
    """A ``Receipt`` row for ``doc`` (a new id, never stored), to render formats directly."""
    text = json.dumps(doc, ensure_ascii=ensure_ascii)
    return Receipt(
        id=uuid.uuid4(),
        partner_id=uuid.uuid4(),
        document=text,
        document_hash=hashlib.sha256(text.encode()).hexdigest(),
        receipt_number=doc["receiptNumber"],
        receipt_time=datetime.fromisoformat(doc["receiptTimeStamp"]),
        receipt_timestamp=doc["receiptTimeStamp"],
        merchant_name=doc["merchant"]["name"],
        total=doc["totalPriceIncVAT"],
        currency=doc["currencyISOCode"],
        token_statuses=[],
        created_at=datetime.now(UTC),
    )


def add_connection(
    session: Session,
    user_id: uuid.UUID,
    partner_id: uuid.UUID,
    *,
    now: datetime,
    scope: str = "receipt:read",
    metadata: dict[str, Any] | None = None,
    revoked: bool = False,
) -> Connection:
    """A connection (a ``service_id``) of the user to a partner app, active unless
    ``revoked``, added to ``session`` directly, without the OAuth flow."""
    connection = Connection(
        id=uuid.uuid4(),
        user_id=user_id,
        partner_id=partner_id,
        scope=scope,
        partner_metadata=metadata,
        created_at=now,
        updated_at=now,
        revoked_at=now if revoked else None,
    )
    session.add(connection)
    return connection


def metric(client: httpx.Client, sample: str) -> float:
    """The value of one sample of ``/metrics`` (a name with its labels), 0 when absent."""
    for line in client.get("/metrics").text.splitlines():
        name, _, value = line.rpartition(" ")
        if name == sample:
            return float(value)
    return 0.0


def receipt_rows(partner_id: uuid.UUID, now: datetime, *numbers: str) -> list[dict[str, Any]]:
    """Rows of the ``receipts`` table (``Database.insert_rows``), one a receipt number."""
    return [
        {
            "id": new_id(),
            "partner_id": partner_id,
            "document": "{}",
            "document_hash": "0" * 64,
            "receipt_number": number,
            "receipt_time": now,
            "receipt_timestamp": now.isoformat(),
            "merchant_name": "Kauppa Oy",
            "total": 1250,
            "currency": "EUR",
            "token_statuses": [{"type": "RECEIPT_ID", "status": "link_created"}],
            "return_count": 0,
            "created_at": now,
            "sandbox": True,
        }
        for number in numbers
    ]


def grant_row(partner_id: uuid.UUID, receipt_id: uuid.UUID, now: datetime) -> dict[str, Any]:
    """A ``posted`` grant's row."""
    return {
        "id": new_id(),
        "partner_id": partner_id,
        "receipt_id": receipt_id,
        "receipt_time": now,
        "reason": GrantReason.POSTED,
    }


def store_grants(services: Services, receipts: int = 400) -> list[tuple[uuid.UUID, uuid.UUID]]:
    """``receipts`` receipts of four partners, each with its poster's grant, and the database's
    statistics of them: a plan test's SQLite otherwise plans by whatever an earlier test left
    in ``sqlite_stat1`` (one grant, say: a scan is then cheapest). Each grant's (partner,
    receipt): a plan for values the statistics know nothing of is a plan for no rows."""
    partners = [make_partner(services, name=f"Kauppa {i} Oy").partner.id for i in range(4)]
    now = services.clock.now()
    rows = [
        row
        for index, partner_id in enumerate(partners)
        for row in receipt_rows(partner_id, now, *(f"G-{index}-{n}" for n in range(receipts // 4)))
    ]
    for minutes, row in enumerate(rows):  # a receipt time of its own, as receipts have
        row["receipt_time"] = now - timedelta(minutes=minutes)
    grants = [grant_row(row["partner_id"], row["id"], row["receipt_time"]) for row in rows]
    with services.db.session() as session:
        services.db.insert_rows(session, {Receipt: rows, ReceiptGrant: grants})
    with services.db.engine.begin() as connection:
        connection.execute(text("ANALYZE"))
    return [(grant["partner_id"], grant["receipt_id"]) for grant in grants]
