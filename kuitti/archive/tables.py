"""What an archive holds: the receipts of one month and every row that must come back with them
for them to read exactly as before.

Each ``Part`` is one table, its rows chosen by the receipt they belong to (``receipt_column``).
In: the receipts (the stored document as text, byte for byte, and every metadata column), their
links (RECEIPT_ID tokens), claims, grants (who may read them: the poster, apps through
connections, issuers through cards), deliveries to users, CARD payments and card matches. The
purchase a match took (``card_purchases.payment_id``) is set again from the matches on restore.

Out, on purpose: e-mails and webhook deliveries (logs of what was sent, with retentions of
their own), idempotency records (a key is replayed for days, not months), the card-matching
queue (a month old enough to archive was decided long ago), and sandbox receipts (deleted after
days). The rows a receipt names but does not own (partners, namespaces, users, connections,
cards, card purchases) stay in the database: a restore checks that they are there.

Signatures and the receipt log: a receipt's signature and the log batch that holds it
(``log_batch_id``) are columns of its row, so they come and go with the receipt. The log's
batches and signed heads are not archived: they are a few rows a minute, kept for as long as
the log is published, so a restored receipt's inclusion proof is served as before.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, Column, DateTime, Integer, String, Table, Uuid
from sqlalchemy.types import TypeEngine

from kuitti.db import UTCDateTime, UTF8Text, table
from kuitti.models import (
    CardMatch,
    CardPaymentRecord,
    Receipt,
    ReceiptClaim,
    ReceiptDelivery,
    ReceiptGrant,
    ReceiptLink,
)


@dataclass(frozen=True)
class Part:
    """One table of an archive: ``receipt_column`` names the receipt each row belongs to."""

    table: Table
    receipt_column: str
    required: bool = True

    @property
    def name(self) -> str:
        return str(self.table.name)  # a plain str: orjson takes no subclass as a key

    @property
    def columns(self) -> list[str]:
        return [column.name for column in self.table.columns]

    @property
    def types(self) -> dict[str, str]:
        """Each column's type, in column order, as the manifest lists them."""
        return {str(column.name): type_name(column) for column in self.table.columns}


# In the order a restore inserts them: a row's parents before it.
PARTS: tuple[Part, ...] = (
    Part(table(Receipt), "id"),
    Part(table(CardPaymentRecord), "receipt_id"),
    Part(table(ReceiptLink), "receipt_id"),
    Part(table(ReceiptClaim), "receipt_id"),
    Part(table(ReceiptGrant), "receipt_id"),
    Part(table(ReceiptDelivery), "receipt_id"),
    Part(table(CardMatch), "receipt_id"),
)
PART_BY_NAME = {part.name: part for part in PARTS}
RECEIPTS = PARTS[0]


# -- values as JSON ------------------------------------------------------------------------------

# Checked in this order: UTF8Text is a String too, UTCDateTime a TypeDecorator of DateTime.
TYPE_NAMES: tuple[tuple[type[TypeEngine[Any]], str], ...] = (
    (Uuid, "uuid"),
    (UTCDateTime, "datetime"),
    (DateTime, "datetime"),
    (JSON, "json"),
    (Boolean, "boolean"),
    (Integer, "integer"),
    (UTF8Text, "text"),
    (String, "text"),
)


def type_name(column: Column[Any]) -> str:
    """How the manifest names a column's type (and so how its JSON values read back)."""
    for kind, name in TYPE_NAMES:
        if isinstance(column.type, kind):
            return name
    raise TypeError(f"{column}: an archive has no form for {column.type!r}")


_DECODERS: dict[str, Callable[[Any], Any]] = {
    "uuid": uuid.UUID,
    "datetime": datetime.fromisoformat,
}


def decoders(types: list[str]) -> list[Callable[[Any], Any]]:
    """For a row's JSON values, in column order: each back in its Python type (orjson writes
    UUIDs and aware times as text; the rest are JSON's own)."""
    return [_DECODERS.get(name, _as_is) for name in types]


def _as_is(value: Any) -> Any:
    return value
