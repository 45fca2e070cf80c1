"""Every table, one module per aggregate. Importing this package registers them all on
``Base.metadata`` (Alembic needs the one metadata)."""

from kuitti.models.cards import (
    Card,
    CardMatch,
    CardMatchingQueue,
    CardPaymentRecord,
    CardPurchase,
    CardTransaction,
)
from kuitti.models.delivery import DynamicQrCode
from kuitti.models.oauth import AuthorizationCode, Connection, IssuedToken, SigningKey
from kuitti.models.outbox import MailMessage, WebhookAttempt, WebhookDelivery
from kuitti.models.partners import Namespace, Partner, PartnerRole
from kuitti.models.receipts import (
    IdempotencyRecord,
    Receipt,
    ReceiptDelivery,
    ReceiptGrant,
    ReceiptLink,
)
from kuitti.models.users import LoginThrottle, User, UserSession, UserToken

__all__ = [
    "AuthorizationCode",
    "Card",
    "CardMatch",
    "CardMatchingQueue",
    "CardPaymentRecord",
    "CardPurchase",
    "CardTransaction",
    "Connection",
    "DynamicQrCode",
    "IdempotencyRecord",
    "IssuedToken",
    "LoginThrottle",
    "MailMessage",
    "Namespace",
    "Partner",
    "PartnerRole",
    "Receipt",
    "ReceiptDelivery",
    "ReceiptGrant",
    "ReceiptLink",
    "SigningKey",
    "User",
    "UserSession",
    "UserToken",
    "WebhookAttempt",
    "WebhookDelivery",
]
