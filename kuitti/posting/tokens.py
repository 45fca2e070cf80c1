"""What each token of a create-receipt request delivers, and the status reported for it.

Statuses (docs/delivery.md, "Tokens"):

- ``link_created``: a RECEIPT_ID token; the namespace link now shows the receipt.
- ``delivered``: the token reached a service user (DYNAMIC_QR_CODE, CARD, USER, or EMAIL to an
  address a verified user has); the receipt is theirs.
- ``email_queued``: an EMAIL token whose address belongs to no verified user; the e-mail still goes.
- ``sandbox``: any token but RECEIPT_ID of a sandbox partner's receipt (docs/sandbox.md). Nobody
  is reached: an EMAIL token's message is written as an ``.eml`` file, never sent; a CARD token
  naming a sandbox issuer's card lets that issuer read the receipt.
- ``unmatched``: the token resolves to nobody (unknown or expired QR value, unknown card or a card
  with no user, a revoked or foreign user token). Never an error: malformed tokens were refused
  by validation with ``invalid_token`` before we get here.

A token's delivery has two steps. ``resolve_tokens`` only reads: whom or what each token reaches
(the QR code's connection, the card and its holder, the user of a user token or of a verified
address), and so its status, which depends on nothing else. The receipt's row is then inserted
with those statuses, once; ``TokenDeliveries.apply`` writes the deliveries, which refer to it:
the card issuer's grant, the user's delivery (and their apps' notifications), the e-mail row.

Everything runs in ingest's transaction: the deliveries, their webhooks and the e-mail rows commit
with the receipt or not at all. One user reached by several tokens gets the receipt once (and
every token that reached them still reports ``delivered``); one address named twice gets one
e-mail.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from typing import assert_never

from sqlalchemy.orm import Session

from kuitti import links
from kuitti.cards.service import card_for_token
from kuitti.config import Settings
from kuitti.delivery import qr
from kuitti.delivery.mail import enqueue_receipt_mail
from kuitti.delivery.service import deliver_to_user, grant_via_card
from kuitti.metrics import RECEIPT_TOKENS
from kuitti.models import Card, Receipt
from kuitti.oauth.tokens import connection_for_user_token
from kuitti.receipts.validation import Token, TokenType
from kuitti.users.service import user_by_email


class Status(StrEnum):
    DELIVERED = "delivered"
    LINK_CREATED = "link_created"
    EMAIL_QUEUED = "email_queued"
    UNMATCHED = "unmatched"
    SANDBOX = "sandbox"


@dataclass(frozen=True)
class TokenStatus:
    type: TokenType
    status: Status


def receipt_link(settings: Settings, receipt_id: uuid.UUID, tokens: list[Token]) -> str:
    """The link we give people: the first RECEIPT_ID link, else the private link."""
    for token in tokens:
        if token.type is TokenType.RECEIPT_ID and token.namespace is not None:
            return links.namespace_link(settings, token.namespace, token.value)
    return links.private_link(settings, receipt_id)


def resolve_tokens(
    session: Session,
    settings: Settings,
    tokens: list[Token],
    *,
    sandbox: bool,
    now: datetime,
) -> TokenDeliveries:
    """Find whom or what each token reaches, and so its status; reads only. A receipt's row is
    inserted with these statuses, once: ``TokenDeliveries.apply`` then writes the deliveries,
    which refer to it."""
    resolver = _Resolver(session, settings, sandbox, now)
    return TokenDeliveries(tokens, [resolver.resolve(token) for token in tokens])


@dataclass(frozen=True)
class Reach:
    """What one token reaches: its status, and the writes that deliver through it."""

    status: Status
    card: Card | None = None
    """A card whose issuer may then read the receipt."""
    user_id: uuid.UUID | None = None
    via: str = ""
    """The user the receipt goes to, reached through ``via``."""
    mail_to: str | None = None
    """An address the receipt e-mail goes to (once per request)."""


@dataclass(frozen=True)
class TokenDeliveries:
    """A request's tokens and what each reaches (``resolve_tokens``), in the tokens' order."""

    tokens: list[Token]
    reaches: list[Reach]

    @property
    def statuses(self) -> list[TokenStatus]:
        return [
            TokenStatus(t.type, r.status) for t, r in zip(self.tokens, self.reaches, strict=True)
        ]

    def apply(
        self, session: Session, settings: Settings, receipt: Receipt, *, now: datetime
    ) -> None:
        """Deliver the stored ``receipt`` through each token, in order. A user reached twice
        gets it once (``deliver_to_user`` finds the first delivery); an address named twice
        gets one e-mail. The receipt is being ingested, so it has no returns to follow yet."""
        mailed: set[str] = set()
        for reach in self.reaches:
            if reach.mail_to is not None and reach.mail_to.lower() not in mailed:
                mailed.add(reach.mail_to.lower())
                enqueue_receipt_mail(
                    session,
                    to=reach.mail_to,
                    receipt_id=receipt.id,
                    link=receipt_link(settings, receipt.id, self.tokens),
                    sandbox=receipt.sandbox,
                    now=now,
                )
            if reach.card is not None:
                grant_via_card(session, receipt, reach.card, follow_returns=False)
            if reach.user_id is not None:
                deliver_to_user(
                    session, receipt, reach.user_id, via=reach.via, now=now, follow_returns=False
                )
        for item in self.statuses:
            RECEIPT_TOKENS.labels(item.type.value, item.status.value).inc()


class _Resolver:
    """Reads what one request's tokens reach."""

    def __init__(self, session: Session, settings: Settings, sandbox: bool, now: datetime) -> None:
        self.session = session
        self.settings = settings
        self.sandbox = sandbox
        self.now = now

    def resolve(self, token: Token) -> Reach:
        if self.sandbox and token.type is not TokenType.RECEIPT_ID:
            return self._sandbox(token)
        match token.type:
            case TokenType.RECEIPT_ID:
                # Ingest has checked the namespace and stores the link with the receipt.
                return Reach(Status.LINK_CREATED)
            case TokenType.DYNAMIC_QR_CODE:
                assert token.namespace is not None
                connection = qr.connection_for_qr_value(
                    self.session, token.value, token.namespace, now=self.now
                )
                return _to_user(connection.user_id if connection else None, "qr_code")
            case TokenType.CARD:
                return self._card(token)
            case TokenType.EMAIL:
                return self._email(token.value)
            case TokenType.USER:
                connection = connection_for_user_token(
                    self.session, self.settings, token.value, now=self.now
                )
                return _to_user(connection.user_id if connection else None, "user_token")
            case _:
                assert_never(token.type)

    def _sandbox(self, token: Token) -> Reach:
        """A test receipt's token: it reaches no person, whatever it names."""
        if token.type is TokenType.EMAIL:
            # Queued as a sandbox message: an .eml file, never SMTP.
            return Reach(Status.SANDBOX, mail_to=token.value)
        if token.type is TokenType.CARD:
            assert token.id is not None
            card = card_for_token(
                self.session, token.id, token.value, token.namespace, sandbox=True
            )
            return Reach(Status.SANDBOX, card=card)
        return Reach(Status.SANDBOX)

    def _card(self, token: Token) -> Reach:
        assert token.id is not None
        card = card_for_token(self.session, token.id, token.value, token.namespace, sandbox=False)
        if card is None:
            return Reach(Status.UNMATCHED)
        # The issuer may read receipts that reached its cards (docs/api.md, "List receipts").
        return replace(_to_user(card.user_id, "card_token"), card=card)

    def _email(self, address: str) -> Reach:
        user = user_by_email(self.session, address)
        if user is not None and user.email_verified_at is not None:
            return Reach(Status.DELIVERED, user_id=user.id, via="email", mail_to=address)
        return Reach(Status.EMAIL_QUEUED, mail_to=address)


def _to_user(user_id: uuid.UUID | None, via: str) -> Reach:
    if user_id is None:
        return Reach(Status.UNMATCHED)
    # Delivered even when another token of the request reached the same user.
    return Reach(Status.DELIVERED, user_id=user_id, via=via)
