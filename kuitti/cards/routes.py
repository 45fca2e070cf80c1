"""Card issuers' API (docs/api.md, "Cards"): enrol and remove cards, report card transactions.

Authentication: the issuer's API key in ``SERVICE_APIKEY`` (or ``Service-Apikey``), or as
``Authorization: Token <key>``; the partner needs the ``card_issuer`` role. Enrolment may also
carry the holder's ``Authorization: Bearer <token>`` (a connection to the same issuer) to link
the card to that user.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header
from pydantic import BaseModel
from sqlalchemy.orm import raiseload

from kuitti.cards import service
from kuitti.cards.schemas import parse_card_request, parse_transaction_request
from kuitti.deps import Now, RawBody, ReadSession, ServicesDep, WriteSession, release_connection
from kuitti.inputs import parse_json
from kuitti.models import Partner
from kuitti.oauth.bearer import optional_connection
from kuitti.partners.auth import RequestCredentials
from kuitti.partners.keys import CARD_ISSUERS, require_json

router = APIRouter(prefix="/api/v1", tags=["cards"])


class Card(BaseModel):
    """An enrolled card (``name`` only when one was given)."""

    service_card_id: str
    partner_card_id: str
    masked_pan: str
    exp_date: str
    pilot: bool
    name: str | None = None


class CardRemoved(BaseModel):
    service_card_id: str
    partner_card_id: str
    deleted: bool


class CardTransactionRecorded(BaseModel):
    """A stored transaction and the purchase it belongs to; ``matched_receipt_id`` once a
    receipt is linked to that purchase; ``replayed`` when the same transaction came again."""

    transaction_id: str
    service_card_id: str
    partner_card_id: str
    purchase_id: str
    matched_receipt_id: str | None
    replayed: bool


_AUTH_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"description": "Missing or wrong API key (or an invalid holder token)."},
    403: {"description": "The key's partner lacks the card_issuer role."},
}


def _issuer(session: ReadSession, credentials: RequestCredentials) -> Partner:
    holder = CARD_ISSUERS.holder(session, credentials)
    # The card services act as the partner (its sandbox, its webhook): loaded by the holder's id.
    partner = session.get(Partner, holder.id, options=[raiseload(Partner.namespaces)])
    assert partner is not None
    release_connection(session, partner)
    return partner


CardIssuer = Annotated[Partner, Depends(_issuer)]


def _json_object_body(required: list[str], properties: dict[str, Any]) -> dict[str, Any]:
    """``openapi_extra`` for a required JSON-object request body (the routes read the raw body,
    so FastAPI cannot describe it by itself)."""
    return {
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": {"type": "object", "required": required, "properties": properties}
                }
            },
        }
    }


def _json_body(body: bytes, content_type: str | None) -> object:
    require_json(content_type)
    return parse_json(body)


@router.post(
    "/cards/",
    summary="Enrol a card",
    response_model=None,  # the answer is documented, not re-validated
    responses={
        200: {"model": Card},
        **_AUTH_RESPONSES,
        400: {"description": "Invalid fields; a full card number is always refused."},
        409: {"description": "partner_card_id already enrolled with other details."},
    },
    openapi_extra=_json_object_body(
        required=["partner_card_id", "masked_pan", "exp_date"],
        properties={
            "partner_card_id": {"type": "string"},
            "masked_pan": {"type": "string", "example": "415301******1234"},
            "exp_date": {"type": "string", "example": "2028-12-31T23:59:59Z"},
            "name": {"type": "string"},
        },
    ),
)
def enroll_card(
    body: RawBody,
    issuer: CardIssuer,
    services: ServicesDep,
    read: ReadSession,
    now: Now,
    credentials: RequestCredentials,
    content_type: Annotated[str | None, Header()] = None,
) -> dict[str, Any]:
    request = parse_card_request(_json_body(body, content_type))
    connection = optional_connection(
        read, services.settings, credentials.authorization, issuer, now=now
    )
    user_id = connection.user_id if connection is not None else None
    read.rollback()  # hand its connection back: the write unit takes one of its own
    with services.db.session() as session:  # the write unit, once the request is accepted
        card, _created = service.enroll_card(session, issuer, request, now=now, user_id=user_id)
        return service.card_json(card)


@router.delete(
    "/cards/{service_card_id}/",
    summary="Remove a card (it never matches again)",
    response_model=None,  # the answer is documented, not re-validated
    responses={
        200: {"model": CardRemoved},
        **_AUTH_RESPONSES,
        404: {"description": "No such card of this issuer."},
    },
)
def delete_card(
    service_card_id: str, issuer: CardIssuer, session: WriteSession, now: Now
) -> dict[str, Any]:
    card = service.delete_card(session, issuer, service_card_id, now=now)
    return {
        "service_card_id": str(card.id),
        "partner_card_id": card.partner_card_id,
        "deleted": True,
    }


@router.post(
    "/card-transactions/",
    summary="Report a card transaction (auth or clearing)",
    response_model=None,  # the answer is documented, not re-validated
    responses={
        200: {"model": CardTransactionRecorded},
        **_AUTH_RESPONSES,
        400: {"description": "Invalid fields."},
        404: {"description": "No such card of this issuer."},
    },
    openapi_extra=_json_object_body(
        required=[
            "transaction_type",
            "amount",
            "currency",
            "timestamp",
            "merchant_id",
            "merchant_name",
        ],
        properties={
            "partner_card_id": {"type": "string"},
            "service_card_id": {"type": "string"},
            "transaction_type": {"type": "string", "enum": ["auth", "clearing"]},
            "amount": {
                "type": "integer",
                "description": "Signed, fractional units; a refund is negative.",
            },
            "currency": {"type": "string", "example": "EUR"},
            "timestamp": {"type": "string", "example": "2026-01-15T14:03:11+02:00"},
            "merchant_id": {"type": "string"},
            "merchant_name": {"type": "string"},
            "reference_number": {"type": "string"},
            "authorization_code": {"type": "string"},
        },
    ),
)
def create_transaction(
    body: RawBody,
    issuer: CardIssuer,
    services: ServicesDep,
    now: Now,
    content_type: Annotated[str | None, Header()] = None,
) -> dict[str, Any]:
    request = parse_transaction_request(_json_body(body, content_type))
    with services.db.session() as session:  # the write unit, once the request is accepted
        return service.record_transaction(session, services.settings, issuer, request, now=now)
