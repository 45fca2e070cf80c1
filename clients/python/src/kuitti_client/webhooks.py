"""Checking kuitti's webhooks (Standard Webhooks, docs/webhooks.md) and reading their bodies.

``WebhookVerifier(webhook_key).verify(body, headers)`` checks the ``Authorization`` header, the
``webhook-signature`` (HMAC-SHA256 over ``<webhook-id>.<webhook-timestamp>.<raw body>``, keyed by
the Base64-decoded part of the ``whsec_`` key) and the timestamp (at most five minutes away),
then returns the body as one of the payload models below.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

TOLERANCE_SECONDS = 5 * 60


class WebhookError(Exception):
    """A webhook that is not kuitti's, is stale, or has a body this client cannot read:
    answer it with an error status and do not act on it."""


class Payload(BaseModel):
    """A webhook body. Unknown keys are kept: the service may add some."""

    model_config = ConfigDict(extra="allow", frozen=True)


class AppReceiptNotification(Payload):
    """To an app: a receipt became its user's. ``related_receipt_id``: for a return, the
    purchase it returns, when the user has that too."""

    notification_type: Literal["receipt_notification"]
    service_id: str
    receipt_id: str
    related_receipt_id: str | None = None
    partner_metadata: dict[str, Any] | None = None


class TransactionData(Payload):
    merchant_name: str


class TransactionNotification(Payload):
    """To an app: a purchase on its user's card; ``receipt_id`` once a receipt matched it."""

    notification_type: Literal["transaction_notification"]
    service_id: str
    receipt_id: str | None
    data: TransactionData
    partner_metadata: dict[str, Any] | None = None


class OAuthRevokeNotification(Payload):
    """To an app: the user removed the connection on kuitti's side; forget the ``service_id``."""

    notification_type: Literal["oauth_authorization_revoke"]
    service_id: str
    partner_metadata: dict[str, Any] | None = None


class CardAddedData(Payload):
    name: str | None = None
    masked_pan: str
    exp_date: str


class CardAdded(Payload):
    """To a card issuer: a card it enrolled has been processed."""

    notification_type: Literal["card_added"]
    partner_card_id: str
    service_card_id: str
    data: CardAddedData


class CardReceiptData(Payload):
    receipt_id: str
    merchant_name: str
    timestamp: str
    amount: str  # fractional units, as text
    merchant_id: str
    reference_number: str | None = None
    authorization_code: str | None = None
    transaction_type: str


class CardReceiptNotification(Payload):
    """To a card issuer: a receipt was matched to one of its cards."""

    notification_type: Literal["receipt_notification"]
    partner_card_id: str
    service_card_id: str
    data: CardReceiptData


class FullReceiptNotification(Payload):
    """To a bank in pilot mode: the whole receipt matched to one of its pilot cards."""

    notification_type: Literal["full_receipt_notification"]
    service_id: str | None
    receipt_id: str
    receipt_json: dict[str, Any]
    receipt_web_url: str


WebhookPayload = (
    AppReceiptNotification
    | TransactionNotification
    | OAuthRevokeNotification
    | CardAdded
    | CardReceiptNotification
    | FullReceiptNotification
)

_MODELS: dict[str, type[WebhookPayload]] = {
    "transaction_notification": TransactionNotification,
    "oauth_authorization_revoke": OAuthRevokeNotification,
    "card_added": CardAdded,
    "full_receipt_notification": FullReceiptNotification,
}


def parse_payload(data: Mapping[str, Any]) -> WebhookPayload:
    """The model of a body by its ``notification_type``; the two ``receipt_notification``
    bodies differ by who receives them: a card issuer's names the card."""
    kind = data.get("notification_type")
    if kind == "receipt_notification":
        model: type[WebhookPayload] = (
            CardReceiptNotification if "partner_card_id" in data else AppReceiptNotification
        )
    elif isinstance(kind, str) and kind in _MODELS:
        model = _MODELS[kind]
    else:
        raise WebhookError(f"unknown notification_type {kind!r}")
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise WebhookError(f"a {kind} body this client cannot read: {error}") from error


class WebhookVerifier:
    """Checks webhooks signed with one partner's ``webhook_key`` (``whsec_…``)."""

    def __init__(
        self,
        webhook_key: str,
        *,
        check_authorization: bool = True,
        tolerance_seconds: int = TOLERANCE_SECONDS,
        now: Callable[[], float] = time.time,
    ) -> None:
        if not webhook_key.startswith("whsec_"):
            raise ValueError("a webhook key starts with whsec_")
        try:
            self._secret = base64.b64decode(webhook_key.removeprefix("whsec_"), validate=True)
        except binascii.Error as error:
            raise ValueError("the webhook key is not whsec_ and Base64") from error
        self._key = webhook_key
        self._check_authorization = check_authorization
        self._tolerance = tolerance_seconds
        self._now = now

    def verify(self, body: bytes, headers: Mapping[str, str]) -> WebhookPayload:
        """The typed body of a genuine webhook; ``WebhookError`` otherwise. ``body`` is the raw
        request body, before any JSON parsing."""
        lower = {name.lower(): value for name, value in headers.items()}
        if self._check_authorization:
            given = lower.get("authorization", "").removeprefix("Token ").encode()
            if not hmac.compare_digest(given, self._key.encode()):
                raise WebhookError("the Authorization header is not this webhook key")
        webhook_id = lower.get("webhook-id", "")
        timestamp = lower.get("webhook-timestamp", "")
        if not webhook_id or not timestamp.isdigit():
            raise WebhookError("webhook-id or webhook-timestamp missing")
        if abs(self._now() - int(timestamp)) > self._tolerance:
            raise WebhookError("the webhook timestamp is too far from now")
        signed = f"{webhook_id}.{timestamp}.".encode() + body
        expected = base64.b64encode(hmac.new(self._secret, signed, hashlib.sha256).digest())
        given_signatures = [
            signature.removeprefix("v1,").encode()
            for signature in lower.get("webhook-signature", "").split()
            if signature.startswith("v1,")
        ]
        if not any(hmac.compare_digest(expected, given) for given in given_signatures):
            raise WebhookError("no valid webhook-signature")
        try:
            data = json.loads(body)
        except ValueError as error:
            raise WebhookError("the body is not JSON") from error
        if not isinstance(data, dict):
            raise WebhookError("the body is not a JSON object")
        return parse_payload(data)
