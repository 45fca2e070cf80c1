"""Standard Webhooks signatures (https://www.standardwebhooks.com/).

``webhook-signature`` is ``v1,<base64 HMAC-SHA256>`` over
``<webhook-id>.<webhook-timestamp>.<body>``, keyed by the Base64-decoded part of the partner's
``whsec_…`` key, so the reference libraries (``standardwebhooks.Webhook(key).verify(body,
headers)``) accept it as is.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from functools import lru_cache

from kuitti.security import WEBHOOK_KEY_PREFIX


class InvalidWebhookKey(ValueError):
    """The stored webhook key is not a ``whsec_`` + Base64 string."""


@lru_cache(maxsize=4096)
def key_bytes(webhook_key: str) -> bytes:
    """The HMAC key inside a ``whsec_…`` string."""
    encoded = webhook_key.removeprefix(WEBHOOK_KEY_PREFIX)
    try:
        raw = base64.b64decode(encoded + "==", validate=False)
    except (binascii.Error, ValueError) as exc:
        raise InvalidWebhookKey("the webhook key is not Base64 after 'whsec_'") from exc
    if not raw:
        raise InvalidWebhookKey("the webhook key is empty")
    return raw


def signature(webhook_key: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` header value for one attempt."""
    signed = b"%s.%d.%s" % (msg_id.encode(), timestamp, body)
    digest = hmac.new(key_bytes(webhook_key), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def webhook_headers(
    webhook_key: str, msg_id: str, timestamp: int, body: bytes, *, bare_authorization: bool
) -> dict[str, str]:
    """Every header kuitti sends with a webhook (besides Host and Content-Length).

    ``Authorization`` carries the key itself, as the interface asks: ``Token <key>`` for
    partner-application and bank-pilot webhooks, the bare key for card-issuer webhooks."""
    return {
        "Content-Type": "application/json",
        "Authorization": webhook_key if bare_authorization else f"Token {webhook_key}",
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature(webhook_key, msg_id, timestamp, body),
        "User-Agent": "kuitti-webhooks/1",
    }
