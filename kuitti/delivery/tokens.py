"""What each token of a create-receipt request delivers, and the status reported for it.

Statuses (SPEC §4): ``delivered`` (it reached a service user), ``link_created`` (a RECEIPT_ID
link), ``email_queued`` (an e-mail went out to an address with no verified user), ``unmatched``
(the token resolves to nobody; never an error).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from sqlalchemy.orm import Session

from kuitti.config import Settings
from kuitti.models import Partner, Receipt
from kuitti.receipts.schema import Receipt as ReceiptDocument
from kuitti.receipts.validation import Token, TokenType

Status = Literal["delivered", "link_created", "email_queued", "unmatched"]


@dataclass(frozen=True)
class TokenStatus:
    type: TokenType
    status: Status


def deliver_tokens(
    session: Session,
    settings: Settings,
    partner: Partner,
    receipt: Receipt,
    document: ReceiptDocument,
    tokens: list[Token],
    *,
    now: datetime,
) -> list[TokenStatus]:
    """Deliver the receipt through each token, in order; report one status per token."""
    statuses: list[TokenStatus] = []
    for token in tokens:
        if token.type is TokenType.RECEIPT_ID:
            statuses.append(TokenStatus(token.type, "link_created"))
        else:
            # DYNAMIC_QR_CODE, CARD, EMAIL and USER are delivered by the token-delivery work.
            statuses.append(TokenStatus(token.type, "unmatched"))
    return statuses
