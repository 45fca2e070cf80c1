"""``kuitti demo``: a realistic example in an empty database, and how to try it."""

from __future__ import annotations

import copy
from typing import Any

from sqlalchemy import func, select

from kuitti.models import Partner, PartnerRole
from kuitti.partners.service import create_partner
from kuitti.receipts.schema import Receipt
from kuitti.receipts.service import create_receipt
from kuitti.receipts.validation import ReceiptRequest, parse_token
from kuitti.security import SecretBox
from kuitti.services import Services
from kuitti.users.service import create_user

DEMO_EMAIL = "demo@example.com"
DEMO_PASSWORD = "demo-password"  # noqa: S105  (printed by the demo on purpose)

_ROW = {
    "name": "Kahvi Juhla Mokka 500 g",
    "EANCode": "6411300000494",
    "quantity": "2",
    "quantityCode": "pcs",
    "unitPriceIncVAT": 599,
    "totalAmountExcVAT": 1051,
    "totalAmountIncVAT": 1198,
    "vats": [
        {"VATRate": "14", "VATAmount": 147, "totalAmountExcVAT": 1051, "totalAmountIncVAT": 1198}
    ],
}


def demo_receipt(number: int) -> dict[str, Any]:
    return {
        "type": "PURCHASE",
        "merchant": {
            "name": "Demokauppa Oy",
            "companyID": "1234567-8",
            "branch": {
                "id": "001",
                "posId": "POS-1",
                "name": "Demokauppa Kamppi",
                "address": {
                    "streetAddress": "Urho Kekkosen katu 1",
                    "city": "Helsinki",
                    "zipCode": "00100",
                    "country": "FI",
                },
            },
        },
        "products": [copy.deepcopy(_ROW)],
        "vats": [
            {
                "VATRate": "14",
                "totalVATAmount": 147,
                "totalAmountExcVAT": 1051,
                "totalAmountIncVAT": 1198,
            }
        ],
        "payments": [
            {
                "type": "CARD",
                "amount": 1198,
                "attributes": {
                    "MID": "DEMO-MID-1",
                    "timeStamp": f"2026-01-{10 + number:02d}T12:00:00+02:00",
                    "maskedPAN": "415301******1234",
                    "authorizationCode": f"A{number:05d}",
                },
            }
        ],
        "receiptNumber": f"DEMO-{number:04d}",
        "receiptTimeStamp": f"2026-01-{10 + number:02d}T12:00:00+02:00",
        "currencyISOCode": "EUR",
        "totalVATAmount": 147,
        "totalPriceExcVAT": 1051,
        "totalPriceIncVAT": 1198,
    }


def fill_demo(services: Services) -> str:
    settings = services.settings
    box = SecretBox(settings.resolved_secret_key)
    now = services.clock.now()
    with services.db.session() as session:
        if session.scalar(select(func.count()).select_from(Partner)):
            raise ValueError("the database is not empty; demo fills only an empty one")
        merchant = create_partner(
            session,
            box,
            name="Demokauppa Oy",
            roles=[PartnerRole.MERCHANT],
            now=now,
            namespaces=["demokauppa"],
            iban="FI2112345600000785",
            bic="NDEAFIHH",
        )
        application = create_partner(
            session,
            box,
            name="Demo Expense App",
            roles=[PartnerRole.APP],
            now=now,
            redirect_uris=["http://localhost:8080/callback"],
        )
        user = create_user(session, DEMO_EMAIL, DEMO_PASSWORD, now=now, verified=True)
        links = []
        for number in (1, 2, 3):
            document = demo_receipt(number)
            token = parse_token(
                {"type": "RECEIPT_ID", "namespace": "demokauppa", "value": f"demo-{number}"}
            )
            request = ReceiptRequest(Receipt.model_validate(document), document, [token])
            _status, body = create_receipt(session, settings, merchant.partner, request, now=now)
            links.extend(body["receipt_links"])
    base = settings.base_url
    return "\n".join(
        [
            "Demo data created.",
            f"  merchant 'Demokauppa Oy'   API key: {merchant.api_key}",
            f"  app 'Demo Expense App'     client_id: {application.partner.client_id}",
            f"                             client_secret: {application.client_secret}",
            f"  user                       {user.email} / {DEMO_PASSWORD}",
            "Receipt links:",
            *(f"  {link}" for link in links),
            "Try:",
            f"  curl -s -H 'Authorization: Token {merchant.api_key}' {base}/api/v1/receipts/",
        ]
    )
