"""Every table, one module per aggregate. Importing this package registers them all on
``Base.metadata`` (Alembic needs the one metadata)."""

from kuitti.models.cards import Card
from kuitti.models.delivery import DynamicQrCode
from kuitti.models.oauth import Connection
from kuitti.models.outbox import MailMessage, WebhookAttempt, WebhookDelivery
from kuitti.models.partners import Namespace, Partner, PartnerRole
from kuitti.models.receipts import (
    IdempotencyRecord,
    Receipt,
    ReceiptDelivery,
    ReceiptGrant,
    ReceiptLink,
)
from kuitti.models.users import User

__all__ = [
    "Card",
    "Connection",
    "DynamicQrCode",
    "IdempotencyRecord",
    "MailMessage",
    "Namespace",
    "Partner",
    "PartnerRole",
    "Receipt",
    "ReceiptDelivery",
    "ReceiptGrant",
    "ReceiptLink",
    "User",
    "WebhookAttempt",
    "WebhookDelivery",
]
