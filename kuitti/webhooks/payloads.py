"""The body of every webhook, one model per notification type, field for field as the interface
gives it (docs/webhooks.md shows each). ``WebhookPayload`` is their union, published in the
OpenAPI document's ``webhooks`` section (``kuitti.openapi``) so that partners can generate their
receivers' types.

Key order is the order of the fields. Keys the interface leaves out when there is no value
(``partner_metadata``, a card holder's ``name``, the payment codes) are listed in
``OMITTED_WHEN_NONE`` and dropped from the body when they are ``None``; every other ``None`` is
sent as ``null``. A ``StoredJSON`` field (a receipt's document) is its stored bytes, written
into the body as they are. The models' JSON schema describes the body as sent
(``_schema_as_sent``).
"""

from __future__ import annotations

import uuid
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, get_args

import orjson
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    SerializerFunctionWrapHandler,
    WithJsonSchema,
    model_serializer,
)

from kuitti.models import Connection


class NotificationType(StrEnum):
    RECEIPT = "receipt_notification"
    TRANSACTION = "transaction_notification"
    OAUTH_REVOKE = "oauth_authorization_revoke"
    FULL_RECEIPT = "full_receipt_notification"
    CARD_ADDED = "card_added"


def _schema_as_sent(schema: dict[str, Any], model: type[Any]) -> None:
    """Every key is sent except an ``OMITTED_WHEN_NONE`` one without a value, which is left
    out rather than sent as ``null``; a receiver must ignore keys it does not know (new ones
    may be added), so the schema allows them."""
    omitted: frozenset[str] = model.OMITTED_WHEN_NONE
    properties: dict[str, dict[str, Any]] = schema["properties"]
    for name, prop in properties.items():
        prop.pop("default", None)
        if name in omitted and "anyOf" in prop:
            (kept,) = [branch for branch in prop.pop("anyOf") if branch != {"type": "null"}]
            prop.update(kept)
    schema["required"] = [name for name in properties if name not in omitted]
    schema.pop("additionalProperties", None)


def _json_bytes(value: Any) -> Any:
    """A document given as its JSON text is kept byte for byte; a decoded one is written."""
    if isinstance(value, str):  # as service_json serves a stored document's text
        return value.encode("utf-8", errors="replace")
    return value if isinstance(value, bytes) else orjson.dumps(value)


_STORED = "stored JSON"  # marks a StoredJSON field among a field's metadata

StoredJSON = Annotated[
    bytes,
    BeforeValidator(_json_bytes),
    WithJsonSchema({"additionalProperties": True, "type": "object"}),
    _STORED,
]
"""A JSON object kept as the bytes it was stored as (a receipt's document, exactly as its
merchant posted it): the body holds those bytes unchanged (``Notification.body``), so a receipt
signature made over them verifies against the span of the body that holds them."""


class Body(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", json_schema_extra=_schema_as_sent)

    OMITTED_WHEN_NONE: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _omit_none(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for key in self.OMITTED_WHEN_NONE:
            if data.get(key) is None:
                data.pop(key, None)
        return data


class Notification(Body):
    """A whole webhook body. ``BARE_AUTHORIZATION``: card-issuer webhooks send
    ``Authorization: <key>`` rather than ``Token <key>``. ``WEBHOOK_NAME``: the body's entry in
    the OpenAPI document's ``webhooks`` (the notification type, unless two bodies share it)."""

    BARE_AUTHORIZATION: ClassVar[bool] = False
    WEBHOOK_NAME: ClassVar[str]

    if TYPE_CHECKING:  # each body declares it as a field, where the interface puts it
        notification_type: NotificationType

    def body(self) -> bytes:
        data = self.model_dump(mode="json")
        for name, info in type(self).model_fields.items():
            if _STORED in info.metadata:
                data[name] = orjson.Fragment(getattr(self, name))
        return orjson.dumps(data)


class _ConnectionPayload(Notification):
    """To a partner application, about one of its connections."""

    OMITTED_WHEN_NONE = frozenset({"partner_metadata"})


class ReceiptNotification(_ConnectionPayload):
    """A receipt became the user's. ``related_receipt_id``: for a return, the purchase it
    returns, when the user has that too."""

    OMITTED_WHEN_NONE = frozenset({"partner_metadata", "related_receipt_id"})
    WEBHOOK_NAME = NotificationType.RECEIPT

    notification_type: Literal[NotificationType.RECEIPT] = NotificationType.RECEIPT
    service_id: uuid.UUID
    receipt_id: uuid.UUID
    related_receipt_id: uuid.UUID | None = None
    partner_metadata: dict[str, Any] | None = None

    @classmethod
    def about(
        cls,
        connection: Connection,
        *,
        receipt_id: uuid.UUID,
        related_receipt_id: uuid.UUID | None = None,
    ) -> ReceiptNotification:
        return cls(
            service_id=connection.id,
            receipt_id=receipt_id,
            related_receipt_id=related_receipt_id,
            partner_metadata=connection.partner_metadata or None,
        )


class TransactionData(Body):
    merchant_name: str


class TransactionNotification(_ConnectionPayload):
    """A card issuer reported a purchase on the user's card; ``receipt_id`` when matched."""

    WEBHOOK_NAME = NotificationType.TRANSACTION

    notification_type: Literal[NotificationType.TRANSACTION] = NotificationType.TRANSACTION
    service_id: uuid.UUID
    receipt_id: uuid.UUID | None
    data: TransactionData
    partner_metadata: dict[str, Any] | None = None

    @classmethod
    def about(
        cls, connection: Connection, *, receipt_id: uuid.UUID | None, merchant_name: str
    ) -> TransactionNotification:
        return cls(
            service_id=connection.id,
            receipt_id=receipt_id,
            data=TransactionData(merchant_name=merchant_name),
            partner_metadata=connection.partner_metadata or None,
        )


class OAuthRevokeNotification(_ConnectionPayload):
    """The user removed the connection on the service side."""

    WEBHOOK_NAME = NotificationType.OAUTH_REVOKE

    notification_type: Literal[NotificationType.OAUTH_REVOKE] = NotificationType.OAUTH_REVOKE
    service_id: uuid.UUID
    partner_metadata: dict[str, Any] | None = None

    @classmethod
    def about(cls, connection: Connection) -> OAuthRevokeNotification:
        return cls(service_id=connection.id, partner_metadata=connection.partner_metadata or None)


class CardAddedData(Body):
    OMITTED_WHEN_NONE = frozenset({"name"})

    name: str | None = None
    masked_pan: str
    exp_date: str


class CardAdded(Notification):
    """To a card issuer: a card it enrolled has been processed."""

    BARE_AUTHORIZATION = True
    WEBHOOK_NAME = NotificationType.CARD_ADDED

    notification_type: Literal[NotificationType.CARD_ADDED] = NotificationType.CARD_ADDED
    partner_card_id: str
    service_card_id: uuid.UUID
    data: CardAddedData


class CardReceiptData(Body):
    OMITTED_WHEN_NONE = frozenset({"reference_number", "authorization_code"})

    receipt_id: uuid.UUID
    merchant_name: str
    timestamp: str
    amount: str  # fractional units, as text
    merchant_id: str
    reference_number: str | None = None
    authorization_code: str | None = None
    transaction_type: str


class CardReceiptNotification(Notification):
    """To a card issuer: a receipt was matched to one of its cards."""

    BARE_AUTHORIZATION = True
    WEBHOOK_NAME = "card_issuer_receipt_notification"

    notification_type: Literal[NotificationType.RECEIPT] = NotificationType.RECEIPT
    partner_card_id: str
    service_card_id: uuid.UUID
    data: CardReceiptData


class FullReceiptNotification(Notification):
    """To a bank in pilot mode: the whole receipt matched to one of its pilot cards."""

    WEBHOOK_NAME = NotificationType.FULL_RECEIPT

    service_id: uuid.UUID | None
    notification_type: Literal[NotificationType.FULL_RECEIPT] = NotificationType.FULL_RECEIPT
    receipt_id: uuid.UUID
    receipt_json: StoredJSON
    receipt_web_url: str


# Every body kuitti sends. Two share ``receipt_notification``; their required keys tell them
# apart (``service_id`` against ``partner_card_id``).
WebhookPayload = (
    ReceiptNotification
    | TransactionNotification
    | OAuthRevokeNotification
    | CardAdded
    | CardReceiptNotification
    | FullReceiptNotification
)
PAYLOAD_MODELS: tuple[type[Notification], ...] = get_args(WebhookPayload)
