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

Everything runs in ingest's transaction: the deliveries, their webhooks and the e-mail rows commit
with the receipt or not at all. One user reached by several tokens gets the receipt once (and
every token that reached them still reports ``delivered``); one address named twice gets one
e-mail.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
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
from kuitti.models import Receipt
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


def deliver_tokens(
    session: Session,
    settings: Settings,
    receipt: Receipt,
    tokens: list[Token],
    *,
    now: datetime,
) -> list[TokenStatus]:
    """Deliver the receipt through each token, in order; report one status per token."""
    delivery = _Delivery(session, settings, receipt, tokens, now)
    statuses = [TokenStatus(token.type, delivery.deliver(token)) for token in tokens]
    for item in statuses:
        RECEIPT_TOKENS.labels(item.type.value, item.status.value).inc()
    return statuses


class _Delivery:
    """One request's tokens; remembers whom it reached so nobody is reached twice."""

    def __init__(
        self,
        session: Session,
        settings: Settings,
        receipt: Receipt,
        tokens: list[Token],
        now: datetime,
    ) -> None:
        self.session = session
        self.settings = settings
        self.receipt = receipt
        self.tokens = tokens
        self.now = now
        self.mailed: set[str] = set()

    def deliver(self, token: Token) -> Status:
        if self.receipt.sandbox and token.type is not TokenType.RECEIPT_ID:
            return self._sandbox(token)
        match token.type:
            case TokenType.RECEIPT_ID:
                # Ingest has checked the namespace and stored the link already.
                return Status.LINK_CREATED
            case TokenType.DYNAMIC_QR_CODE:
                assert token.namespace is not None
                connection = qr.connection_for_qr_value(
                    self.session, token.value, token.namespace, now=self.now
                )
                return self._to_user(connection.user_id if connection else None, "qr_code")
            case TokenType.CARD:
                return self._card(token)
            case TokenType.EMAIL:
                return self._email(token.value)
            case TokenType.USER:
                return self._user_token(token.value)
            case _:
                assert_never(token.type)

    def _sandbox(self, token: Token) -> Status:
        """A test receipt's token: it reaches no person, whatever it names."""
        if token.type is TokenType.EMAIL:
            self._mail(token.value)  # queued as a sandbox message: an .eml file, never SMTP
        elif token.type is TokenType.CARD:
            assert token.id is not None
            card = card_for_token(
                self.session, token.id, token.value, token.namespace, sandbox=True
            )
            if card is not None:
                grant_via_card(self.session, self.receipt, card)
        return Status.SANDBOX

    def _to_user(self, user_id: uuid.UUID | None, via: str) -> Status:
        if user_id is None:
            return Status.UNMATCHED
        # False means the user already has it (another token reached them): still delivered.
        deliver_to_user(
            self.session, self.receipt, user_id, via=via, now=self.now, follow_returns=False
        )
        return Status.DELIVERED

    def _card(self, token: Token) -> Status:
        assert token.id is not None
        card = card_for_token(self.session, token.id, token.value, token.namespace, sandbox=False)
        if card is None:
            return Status.UNMATCHED
        # The issuer may read receipts that reached its cards (docs/api.md, "List receipts").
        grant_via_card(self.session, self.receipt, card, follow_returns=False)
        return self._to_user(card.user_id, "card_token")

    def _user_token(self, jwt: str) -> Status:
        connection = connection_for_user_token(self.session, self.settings, jwt, now=self.now)
        return self._to_user(connection.user_id if connection else None, "user_token")

    def _email(self, address: str) -> Status:
        user = user_by_email(self.session, address)
        verified = user is not None and user.email_verified_at is not None
        self._mail(address)
        if user is not None and verified:
            return self._to_user(user.id, "email")
        return Status.EMAIL_QUEUED

    def _mail(self, address: str) -> None:
        """Queue the receipt e-mail to ``address``, once per request."""
        key = address.lower()
        if key not in self.mailed:
            self.mailed.add(key)
            enqueue_receipt_mail(
                self.session,
                to=address,
                receipt_id=self.receipt.id,
                link=receipt_link(self.settings, self.receipt.id, self.tokens),
                sandbox=self.receipt.sandbox,
                now=self.now,
            )
