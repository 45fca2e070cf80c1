"""Giving a receipt to a person and to partners, and announcing it.

Every way a receipt reaches someone (a token, card-linking, an import from a link) ends here, so
the rules hold everywhere: a user gets a receipt once; each of their active connections with
``receipt:read`` may then read it and gets a ``receipt_notification``. A sandbox partner's
receipt never reaches a person, and a sandbox partner's app never hears of a real receipt
(docs/sandbox.md).

A return linked to its purchase (``kuitti.posting.returns``) follows the purchase: whoever the
purchase reaches later, a user or a card's issuer, the purchase's returns reach too. The purchase
row is read ``FOR SHARE`` after the delivery is written, and linking a return locks it for update
before copying the deliveries, so whichever commits first, the other sees it.

An import through a namespace link is claim-once (``import_from_link``, docs/security.md,
"Namespace links"): the merchant chooses that link's identifier, which may be guessable, so the
first account to hold the receipt keeps it and another account's import is refused, unless the
merchant marked the link shareable.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from kuitti.models import (
    Card,
    Connection,
    Partner,
    Receipt,
    ReceiptClaim,
    ReceiptDelivery,
    ReceiptGrant,
)
from kuitti.models.receipts import GrantReason
from kuitti.oauth.scopes import Scope
from kuitti.webhooks.events import notify_connection
from kuitti.webhooks.payloads import ReceiptNotification


def grant_via_connection(session: Session, receipt: Receipt, connection: Connection) -> bool:
    """Let the connection's partner read the receipt while the connection lasts. False when it
    already could through this connection."""
    source = ReceiptGrant(reason=GrantReason.CONNECTION, connection_id=connection.id)
    return _grant(session, receipt, connection.partner_id, source)


def grant_via_card(
    session: Session, receipt: Receipt, card: Card, *, follow_returns: bool = True
) -> bool:
    """Let the card's issuer read the receipt while the card lasts and keeps its holder. False
    when it already could through this card. ``follow_returns=False``: the receipt is being
    ingested, so it has no returns yet."""
    source = ReceiptGrant(reason=GrantReason.CARD, card_id=card.id, card_user_id=card.user_id)
    granted = _grant(session, receipt, card.partner_id, source)
    if granted and follow_returns:
        for linked in returns_of(session, receipt):
            grant_via_card(session, linked, card)
    return granted


def _grant(session: Session, receipt: Receipt, partner_id: uuid.UUID, source: ReceiptGrant) -> bool:
    # The receipt's time as well: with it the listing index (partner, receipt time, receipt) is
    # an exact probe too. Without it, a planner whose statistics did not yet know the partner's
    # grants read all of them there (docs/scale.md, "At ten million receipts").
    existing = session.scalar(
        select(ReceiptGrant.id).where(
            ReceiptGrant.partner_id == partner_id,
            ReceiptGrant.receipt_time == receipt.receipt_time,
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
    session: Session,
    receipt: Receipt,
    user_id: uuid.UUID,
    *,
    via: str,
    now: datetime,
    follow_returns: bool = True,
) -> bool:
    """Make the receipt the user's and notify their reading connections. False if it already
    was theirs (nothing is sent twice), or the receipt is a sandbox one (never anyone's).
    ``follow_returns=False``: the receipt is being ingested, so it has no returns yet."""
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
    related = _original_held_by(session, receipt, user_id)
    for connection in reading_connections(session, user_id):
        grant_via_connection(session, receipt, connection)
        notify_connection(
            session,
            connection,
            ReceiptNotification.about(
                connection, receipt_id=receipt.id, related_receipt_id=related
            ),
            now=now,
        )
    if follow_returns:
        for linked in returns_of(session, receipt):
            deliver_to_user(session, linked, user_id, via="return", now=now)
    return True


def import_from_link(
    session: Session, receipt: Receipt, user_id: uuid.UUID, *, claim: bool, now: datetime
) -> bool:
    """Import the receipt into the user's account from its link page; False when another
    account holds it (nothing changes). Importing a receipt that is already the user's changes
    nothing and is not refused.

    ``claim``: the import is through a namespace link that is not shareable, so the receipt may
    be held by one account only (``claim_holder``). A private link's token is unguessable: whoever
    has it may import."""
    if session.get(ReceiptDelivery, (user_id, receipt.id)) is not None:
        return True
    if claim and claim_holder(session, receipt.id, user_id, now=now) != user_id:
        return False
    deliver_to_user(session, receipt, user_id, via="import", now=now)
    return True


def claim_holder(
    session: Session, receipt_id: uuid.UUID, user_id: uuid.UUID, *, now: datetime
) -> uuid.UUID:
    """The account that holds the receipt, claiming it for ``user_id`` when nobody does.

    Nobody holds it yet when it has no claim row: the claim then goes to the first account the
    receipt already reached (a token at post time, card-linking, a private-link import), else
    to ``user_id``. The claim row's primary key decides between imports at once: the insert
    does nothing when another transaction's row is there (on PostgreSQL it waits for that
    transaction to end first), and the row read after it is the winner's."""
    first = session.scalar(
        select(ReceiptDelivery.user_id)
        .where(ReceiptDelivery.receipt_id == receipt_id)
        .order_by(ReceiptDelivery.created_at, ReceiptDelivery.user_id)
        .limit(1)
    )
    dialect = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
    session.execute(
        dialect.insert(ReceiptClaim)
        .values(receipt_id=receipt_id, user_id=first or user_id, claimed_at=now)
        .on_conflict_do_nothing(index_elements=[ReceiptClaim.receipt_id])
    )
    holder = session.scalar(
        select(ReceiptClaim.user_id).where(ReceiptClaim.receipt_id == receipt_id)
    )
    assert holder is not None
    return holder


def _original_held_by(session: Session, receipt: Receipt, user_id: uuid.UUID) -> uuid.UUID | None:
    """The return's original, when the user holds it too: an app learns of the relation only
    between receipts its user has."""
    original = receipt.original_receipt_id
    if original is None or session.get(ReceiptDelivery, (user_id, original)) is None:
        return None
    return original


def returns_of(session: Session, receipt: Receipt) -> list[Receipt]:
    """The returns linked to this receipt, read after locking its row ``FOR SHARE`` so that a
    return being linked concurrently is either seen here or sees what this transaction wrote."""
    count = session.scalar(
        select(Receipt.return_count).where(Receipt.id == receipt.id).with_for_update(read=True)
    )
    if not count:
        return []
    return list(
        session.scalars(
            select(Receipt)
            .where(Receipt.original_receipt_id == receipt.id)
            .order_by(Receipt.receipt_time, Receipt.id)
        )
    )


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
