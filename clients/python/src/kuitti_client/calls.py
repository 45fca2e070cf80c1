"""What the sync and async clients share: each call as data, the retry rule and the answer
checks. The two clients only send what these functions describe."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx

from kuitti_client.errors import KuittiError, retry_after
from kuitti_client.models import (
    CardEnrolment,
    CardTransaction,
    DataFormat,
    ReceiptDocument,
    Token,
    TokenAttributes,
    TokenReceiptPost,
)

RETRY_STATUSES = frozenset({429, 503})
DATA_FORMATS: frozenset[str] = frozenset(
    {"service_json", "service_pdf", "finvoice_xml", "finvoice_pdf"}
)


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry a call that is safe to repeat (every read, and a
    receipt post, which carries the same ``Idempotency-Key`` each time).

    ``attempts`` counts the first one. A 429 or 503 answer waits what its ``Retry-After``
    asks; a wait longer than ``max_wait`` is not waited for (the error is raised with its
    ``retry_after``, for the caller to decide). Without the header, and after a connection
    error, the waits grow from ``backoff`` seconds, doubling."""

    attempts: int = 4
    backoff: float = 0.5
    max_wait: float = 30.0

    def delay(self, attempt: int, response: httpx.Response | None) -> float | None:
        """Seconds to wait before the next attempt, or None to stop after ``attempt``.
        ``response`` is None after a connection error."""
        if attempt >= self.attempts:
            return None
        if response is not None:
            if response.status_code not in RETRY_STATUSES:
                return None
            asked = retry_after(response)
            if asked is not None:
                return asked if asked <= self.max_wait else None
        return float(min(self.backoff * 2 ** (attempt - 1), self.max_wait))


NO_RETRIES = RetryPolicy(attempts=1)


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    params: Mapping[str, str] = field(default_factory=dict)
    json: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    retry: bool = True


def identity_headers(api_key: str, access_token: str | None) -> dict[str, str]:
    """A partner's own key (``Authorization: Token <key>``, what a merchant must send and every
    reader may), or an app acting for a user: its key as ``Service-Apikey`` (the proxy-safe
    spelling of ``SERVICE_APIKEY``) and the user's token as ``Authorization: Bearer``."""
    if access_token is None:
        return {"Authorization": f"Token {api_key}"}
    return {"Service-Apikey": api_key, "Authorization": f"Bearer {access_token}"}


def post_receipt(
    receipt: ReceiptDocument,
    tokens: Sequence[Token | Mapping[str, Any]] | None,
    idempotency_key: str | None,
) -> Call:
    """``tokens=None`` posts the card-linking form (the document itself); otherwise the token
    form. Without a key, a fresh one: every retry of this call then sends the same one."""
    body: Any = receipt
    if tokens is not None:
        checked = [t if isinstance(t, Token) else Token.model_validate(t) for t in tokens]
        post = TokenReceiptPost(attributes=TokenAttributes(tokens=checked), receipt=receipt)
        body = post.model_dump(mode="json", exclude_none=True)
    key = idempotency_key if idempotency_key is not None else str(uuid.uuid4())
    return Call("POST", "/api/v1/receipts/", json=body, headers={"Idempotency-Key": key})


def get_receipt(
    receipt_id: str, data_format: DataFormat, layout: str | None, lang: str | None
) -> Call:
    if data_format not in DATA_FORMATS:
        raise ValueError(f"unknown data format {data_format!r}")
    params = {k: v for k, v in (("layout", layout), ("lang", lang)) if v is not None}
    return Call("GET", f"/api/v1/receipts/{receipt_id}/{data_format}/", params=params)


def list_page(since: datetime | str | None, limit: int | None, cursor: str | None) -> Call:
    params: dict[str, str] = {}
    if since is not None:
        params["since"] = since_text(since)
    if limit is not None:
        params["limit"] = str(limit)
    if cursor is not None:
        params["cursor"] = cursor
    return Call("GET", "/api/v1/receipts/", params=params)


def enroll_card(card: CardEnrolment | Mapping[str, Any]) -> Call:
    """Enrolling the same card with the same details again answers the same card: safe to
    retry."""
    body = card if isinstance(card, CardEnrolment) else CardEnrolment.model_validate(card)
    return Call("POST", "/api/v1/cards/", json=body.model_dump(mode="json", exclude_none=True))


def delete_card(service_card_id: str) -> Call:
    """Not retried: a repeat after a lost answer would find no card (404)."""
    return Call("DELETE", f"/api/v1/cards/{service_card_id}/", retry=False)


def card_transaction(transaction: CardTransaction | Mapping[str, Any]) -> Call:
    """The same transaction sent again is recognised (``replayed``): safe to retry."""
    body = (
        transaction
        if isinstance(transaction, CardTransaction)
        else CardTransaction.model_validate(transaction)
    )
    return Call(
        "POST", "/api/v1/card-transactions/", json=body.model_dump(mode="json", exclude_none=True)
    )


def since_text(since: datetime | str) -> str:
    if isinstance(since, str):
        return since
    if since.tzinfo is None:
        raise ValueError("since must carry a UTC offset (an aware datetime)")
    return since.isoformat()


def checked(response: httpx.Response) -> httpx.Response:
    """The response when it is a success; else its ``KuittiError``."""
    if response.is_success:
        return response
    raise KuittiError.from_response(response)
