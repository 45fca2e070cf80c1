"""Giving a receipt to a person and to partners, and announcing it.

Every way a receipt reaches someone (a token, card-linking, an import from a link) ends here, so
the rules hold everywhere: a user gets a receipt once; each of their active connections with
``receipt:read`` may then read it and gets a ``receipt_notification``. A sandbox partner's
receipt never reaches a person, and a sandbox partner's app never hears of a real receipt
(docs/sandbox.md).
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from kuitti.models import Card, Connection, Partner, Receipt, ReceiptDelivery, ReceiptGrant
from kuitti.models.receipts import GrantReason
from kuitti.oauth.scopes import Scope
from kuitti.webhooks.events import notify_connection
from kuitti.webhooks.payloads import ReceiptNotification


def grant_via_connection(session: Session, receipt: Receipt, connection: Connection) -> bool:
    """Let the connection's partner read the receipt while the connection lasts. False when it
    already could through this connection."""
    source = ReceiptGrant(reason=GrantReason.CONNECTION, connection_id=connection.id)
    return _grant(session, receipt, connection.partner_id, source)


def grant_via_card(session: Session, receipt: Receipt, card: Card) -> bool:
    """Let the card's issuer read the receipt while the card lasts and keeps its holder. False
    when it already could through this card."""
    source = ReceiptGrant(reason=GrantReason.CARD, card_id=card.id, card_user_id=card.user_id)
    return _grant(session, receipt, card.partner_id, source)


def _grant(session: Session, receipt: Receipt, partner_id: uuid.UUID, source: ReceiptGrant) -> bool:
    existing = session.scalar(
        select(ReceiptGrant.id).where(
            ReceiptGrant.partner_id == partner_id,
            ReceiptGrant.receipt_id == receipt.id,
            ReceiptGrant.connection_id.is_not_distinct_from(source.connection_id),
            ReceiptGrant.card_id.is_not_distinct_from(source.card_id),
        )
    )
    if existing is not None:
        return False
    source.partner_id = partner_id
    source.receipt_id = receipt.id
    source.receipt_time = receipt.receipt_time
    session.add(source)
    session.flush()
    return True


def deliver_to_user(
    session: Session, receipt: Receipt, user_id: uuid.UUID, *, via: str, now: datetime
) -> bool:
    """Make the receipt the user's and notify their reading connections. False if it already
    was theirs (nothing is sent twice), or the receipt is a sandbox one (never anyone's)."""
    if receipt.sandbox or session.get(ReceiptDelivery, (user_id, receipt.id)) is not None:
        return False
    session.add(
        ReceiptDelivery(
            user_id=user_id,
            receipt_id=receipt.id,
            receipt_time=receipt.receipt_time,
            via=via,
            created_at=now,
        )
    )
    session.flush()
    for connection in reading_connections(session, user_id):
        grant_via_connection(session, receipt, connection)
        notify_connection(
            session,
            connection,
            ReceiptNotification.about(connection, receipt_id=receipt.id),
            now=now,
        )
    return True


def reading_connections(session: Session, user_id: uuid.UUID) -> list[Connection]:
    """The user's active connections that may read receipts, to apps of production partners
    only: a sandbox app may connect users (to try the OAuth flow) but never reads or hears of
    their real receipts."""
    connections = session.scalars(
        select(Connection)
        .join(Partner, Partner.id == Connection.partner_id)
        .where(
            Connection.user_id == user_id,
            Connection.revoked_at.is_(None),
            Partner.sandbox.is_(False),
        )
        .order_by(Connection.created_at)
    )
    return [c for c in connections if Scope.RECEIPT_READ.value in c.scopes]
