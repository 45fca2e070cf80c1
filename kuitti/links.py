"""Receipt link URLs: the namespace link of a RECEIPT_ID token, and every receipt's private
link, whose token is a MAC of the receipt id under the server secret (unguessable, verifiable,
nothing to store)."""

from __future__ import annotations

import base64
import binascii
import hmac
import uuid
from urllib.parse import quote

from sqlalchemy.orm import Session

from kuitti.config import Settings
from kuitti.models import Receipt, ReceiptLink
from kuitti.security import sign

_PURPOSE = "receipt-link"
_MAC_BYTES = 16


def namespace_link(settings: Settings, namespace: str, identifier: str) -> str:
    return f"{settings.link_base}/ns/{quote(namespace, safe='')}/r/{quote(identifier, safe='')}"


def private_link_token(settings: Settings, receipt_id: uuid.UUID) -> str:
    mac = sign(settings.resolved_secret_key, _PURPOSE, receipt_id.bytes)[:_MAC_BYTES]
    return base64.urlsafe_b64encode(receipt_id.bytes + mac).decode().rstrip("=")


def private_link(settings: Settings, receipt_id: uuid.UUID) -> str:
    return f"{settings.link_base}/r/{private_link_token(settings, receipt_id)}"


def receipt_id_from_private_token(settings: Settings, token: str) -> uuid.UUID | None:
    """The receipt a private-link token names, or None when the token is not ours."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    except (binascii.Error, ValueError):
        return None
    if len(raw) != 16 + _MAC_BYTES:
        return None
    receipt_id = uuid.UUID(bytes=raw[:16])
    expected = sign(settings.resolved_secret_key, _PURPOSE, receipt_id.bytes)[:_MAC_BYTES]
    return receipt_id if hmac.compare_digest(raw[16:], expected) else None


def receipt_for_namespace_link(session: Session, namespace: str, identifier: str) -> Receipt | None:
    """The receipt at ``/ns/<namespace>/r/<identifier>``. One lookup by the pair: an identifier
    of another namespace is simply not found (nothing to enumerate across namespaces)."""
    if len(namespace) > 64 or len(identifier) > 200:
        return None
    link = session.get(ReceiptLink, (namespace, identifier))
    return session.get(Receipt, link.receipt_id) if link is not None else None


def is_shareable(session: Session, namespace: str, identifier: str) -> bool:
    """Whether the merchant marked this namespace link ``"shareable": true``, so that any
    number of accounts may import its receipt."""
    link = session.get(ReceiptLink, (namespace, identifier))
    return link is not None and link.shareable


def receipt_for_private_token(session: Session, settings: Settings, token: str) -> Receipt | None:
    receipt_id = receipt_id_from_private_token(settings, token)
    return session.get(Receipt, receipt_id) if receipt_id is not None else None
