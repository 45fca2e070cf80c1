"""A Python client for the kuitti receipt service."""

from kuitti_client.calls import RetryPolicy
from kuitti_client.client import AsyncClient, Client
from kuitti_client.errors import KuittiError
from kuitti_client.models import (
    AccessToken,
    Card,
    CardRemoved,
    ErrorBody,
    QrCode,
    ReceiptCreated,
    ReceiptDocument,
    ReceiptList,
    ReceiptSummary,
    Revoked,
    Token,
    TokenReceiptPost,
    TokenResult,
)
from kuitti_client.oauth import (
    AuthorizationError,
    AuthorizationRequest,
    code_from_callback,
    exchange_code,
    exchange_code_async,
    start_authorization,
)
from kuitti_client.webhooks import WebhookError, WebhookPayload, WebhookVerifier, parse_payload

__all__ = [
    "AccessToken",
    "AsyncClient",
    "AuthorizationError",
    "AuthorizationRequest",
    "Card",
    "CardRemoved",
    "Client",
    "ErrorBody",
    "KuittiError",
    "QrCode",
    "ReceiptCreated",
    "ReceiptDocument",
    "ReceiptList",
    "ReceiptSummary",
    "RetryPolicy",
    "Revoked",
    "Token",
    "TokenReceiptPost",
    "TokenResult",
    "WebhookError",
    "WebhookPayload",
    "WebhookVerifier",
    "code_from_callback",
    "exchange_code",
    "exchange_code_async",
    "parse_payload",
    "start_authorization",
]
