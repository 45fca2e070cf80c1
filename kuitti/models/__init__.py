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
from kuitti.models.partners import IdPolicy, Namespace, Partner, PartnerRole
from kuitti.models.receipts import (
    IdempotencyRecord,
    Receipt,
    ReceiptClaim,
    ReceiptDelivery,
    ReceiptGrant,
    ReceiptLink,
)
from kuitti.models.signing import ReceiptLogBatch, ReceiptLogHead, ReceiptSigningKey
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
    "IdPolicy",
    "IdempotencyRecord",
    "IssuedToken",
    "LoginThrottle",
    "MailMessage",
    "Namespace",
    "Partner",
    "PartnerRole",
    "Receipt",
    "ReceiptClaim",
    "ReceiptDelivery",
    "ReceiptGrant",
    "ReceiptLink",
    "ReceiptLogBatch",
    "ReceiptLogHead",
    "ReceiptSigningKey",
    "SigningKey",
    "User",
    "UserSession",
    "UserToken",
    "WebhookAttempt",
    "WebhookDelivery",
]
