"""``kuitti demo``: a realistic example, added to any database, and how to try it."""

from __future__ import annotations

import copy
import secrets
from typing import Any
from urllib.parse import quote

from kuitti.models import PartnerRole
from kuitti.partners.service import create_partner
from kuitti.posting.service import create_receipt
from kuitti.receipts.schema import Receipt
from kuitti.receipts.validation import ReceiptRequest, parse_token
from kuitti.security import SecretBox
from kuitti.services import Services
from kuitti.users.service import create_user

DEMO_REDIRECT_URI = "http://localhost:8080/callback"
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
    """Add one demo set (its own tag, so a used database takes another) and say how to use it."""
    settings = services.settings
    box = SecretBox(settings.resolved_secret_key)
    now = services.clock.now()
    tag = secrets.token_hex(3)
    namespace = f"demokauppa-{tag}"
    email = f"demo-{tag}@example.com"
    with services.db.session() as session:
        merchant = create_partner(
            session,
            box,
            name="Demokauppa Oy",
            roles=[PartnerRole.MERCHANT],
            now=now,
            namespaces=[namespace],
            iban="FI2112345600000785",
            bic="NDEAFIHH",
        )
        application = create_partner(
            session,
            box,
            name="Demo Expense App",
            roles=[PartnerRole.APP],
            now=now,
            redirect_uris=[DEMO_REDIRECT_URI],
        )
        create_user(session, email, DEMO_PASSWORD, now=now, verified=True)
        receipt_ids, links = [], []
        tokens = [
            *({"type": "RECEIPT_ID", "namespace": namespace, "value": f"demo-{n}"} for n in (1, 2)),
            {"type": "EMAIL", "value": email},  # delivered to the demo user's account
        ]
        for number, raw_token in enumerate(tokens, start=1):
            document = demo_receipt(number)
            request = ReceiptRequest(
                Receipt.model_validate(document), document, [parse_token(raw_token)]
            )
            _status, body = create_receipt(session, settings, merchant.partner, request, now=now)
            receipt_ids.append(body["receipt_id"])
            links.extend(body["receipt_links"])
    read = '-H "Authorization: $MERCHANT_KEY"'
    receipt_url = "$KUITTI/api/v1/receipts/$RECEIPT_ID"
    consent = (
        f"$KUITTI/auth?response_type=code&client_id=$CLIENT_ID&redirect_uri="
        f"{quote(DEMO_REDIRECT_URI, safe='')}&scope=receipt%3Aread&state=demo"
    )
    return "\n".join(
        [
            f"# Demo set {tag} added: a merchant, a partner app, a user and three receipts.",
            "",
            "# Paste these into a shell; the README tour and docs/oauth.md use the same names.",
            f"export KUITTI={settings.base_url}",
            f"export MERCHANT_KEY={merchant.api_key}   # merchant 'Demokauppa Oy'",
            f"export API_KEY={application.api_key}   # app 'Demo Expense App' (SERVICE_APIKEY)",
            f"export CLIENT_ID={application.partner.client_id}",
            f"export CLIENT_SECRET={application.client_secret}",
            f"export REDIRECT_URI={DEMO_REDIRECT_URI}",
            f"export DEMO_EMAIL={email} DEMO_PASSWORD={DEMO_PASSWORD}   # the user's login",
            f"export RECEIPT_ID={receipt_ids[0]}",
            "",
            "# Receipt links (open one in a browser; log in as the demo user to keep it):",
            *(f"#   {link}" for link in links),
            "",
            "# The first receipt in each format, read with the merchant's key:",
            f'curl -fsS -w "\\n" "{receipt_url}/service_json/" {read}',
            f'curl -fsS -o receipt.pdf "{receipt_url}/service_pdf/" {read}',
            f'curl -fsS -o finvoice.xml "{receipt_url}/finvoice_xml/" {read}',
            f'curl -fsS -o finvoice.pdf "{receipt_url}/finvoice_pdf/" {read}',
            "",
            "# Connect the app as the demo user (docs/oauth.md, 'Try it'): open in a browser",
            f'echo "{consent}"',
        ]
    )
