"""Who may read which receipts (the single read and the list), and the list itself.

A reader is a partner by its API key, or a partner application on behalf of one of its users
(``SERVICE_APIKEY`` + ``Authorization: Bearer``). The single read and the list apply the same
rule (``_readable_by_partner``), so a receipt is listed exactly when it can be read:

- a user-authorized reader sees the receipts delivered to that user;
- a partner's key sees the receipts it posted, and those that reached it through a connection
  or a card for as long as that source lasts (an active connection; a card not removed that
  still has the holder it had). Ending the consent ends the right at once, whoever ends it: the
  user, the partner, an account deletion or a card removal.

Why one long module: the single read and the list are built from the one rule, and its
statements are read best next to both of their users.
"""

from __future__ import annotations

import base64
import binascii
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any, NamedTuple

from sqlalchemy import (
    ARRAY,
    Boolean,
    ColumnElement,
    Integer,
    Select,
    Uuid,
    and_,
    any_,
    bindparam,
    exists,
    or_,
    select,
    tuple_,
)
from sqlalchemy.orm import InstrumentedAttribute, Session, aliased

from kuitti.db import Database, uuid_text
from kuitti.errors import ErrorDetail, InvalidRequest, NotFound, Unauthorized
from kuitti.models import Card, Connection, Partner, Receipt, ReceiptDelivery, ReceiptGrant
from kuitti.models.receipts import GrantReason
from kuitti.partners.keys import INVALID_KEY, holds_the_key, look_up_holder

MAX_LIST_LIMIT = 200
DEFAULT_LIST_LIMIT = 50


@dataclass(frozen=True)
class Reader:
    """Who reads: a partner by its key, or a partner app on behalf of one of its users."""

    partner_id: uuid.UUID
    user_id: uuid.UUID | None = None
    # A sandbox partner's key or app: it reads sandbox receipts only, a production one never
    # does (docs/sandbox.md); the other kind is 404 exactly as if it did not exist.
    sandbox: bool = False


def _grant_in_force() -> ColumnElement[bool]:
    """A grant row still gives the right: posted, or its connection or card still holds.

    Both sources are looked up by primary key, and grants by ``(receipt_id, partner_id)`` or the
    listing index, so the check costs two index probes per grant."""
    return or_(
        ReceiptGrant.reason == GrantReason.POSTED,
        exists().where(
            Connection.id == ReceiptGrant.connection_id, Connection.revoked_at.is_(None)
        ),
        exists().where(
            Card.id == ReceiptGrant.card_id,
            Card.deleted_at.is_(None),
            Card.user_id.is_not_distinct_from(ReceiptGrant.card_user_id),
        ),
    )


def _readable_by_partner(partner_id: uuid.UUID | ColumnElement[Any]) -> ColumnElement[bool]:
    return and_(ReceiptGrant.partner_id == partner_id, _grant_in_force())


def _may_read(reader_kind: str) -> ColumnElement[bool]:
    """The rights check of the single read, on ``bindparam("receipt_id")`` and the reader's
    ``partner_id`` or ``user_id``."""
    if reader_kind == "user":
        return exists().where(
            ReceiptDelivery.user_id == bindparam("user_id"),
            ReceiptDelivery.receipt_id == bindparam("receipt_id"),
        )
    return _partner_may_read(bindparam("partner_id"))


def _partner_may_read(partner_id: ColumnElement[Any]) -> ColumnElement[bool]:
    """A grant in force lets ``partner_id`` read ``bindparam("receipt_id")``."""
    return exists().where(
        ReceiptGrant.receipt_id == bindparam("receipt_id"), _readable_by_partner(partner_id)
    )


# Built once: a prebuilt statement skips rebuilding and re-keying the expression for
# SQLAlchemy's statement cache on every request.
_MAY_READ = {kind: select(_may_read(kind)) for kind in ("partner", "user")}
# The columns a read needs before it renders: the receipt's ETag depends on them alone
# (``kuitti.receipts.formats.rendering.etag``), and the document itself is loaded only when
# the rendering is not cached.
_READ_COLUMNS = (
    Receipt.id,
    Receipt.sandbox,
    Receipt.document_hash,
    Receipt.original_receipt_id,
    Receipt.return_count,
    Receipt.signature.is_not(None),
    Partner.id,
    Partner.iban,
    Partner.bic,
)


@dataclass(frozen=True)
class Poster:
    """The partner that posted a receipt, as far as a rendering depends on it."""

    id: uuid.UUID
    iban: str | None
    bic: str | None


@dataclass(frozen=True)
class ReadableReceipt:
    """A receipt its reader may see, as far as its ETag depends on it."""

    id: uuid.UUID
    sandbox: bool
    document_hash: str
    original_receipt_id: uuid.UUID | None
    return_count: int
    signed: bool
    poster: Poster

    @classmethod
    def of(cls, columns: Sequence[Any]) -> ReadableReceipt:
        """From the values of ``_READ_COLUMNS``, in order."""
        receipt_id, sandbox, document_hash, original, returns, signed, *poster = columns
        return cls(
            receipt_id, sandbox, document_hash, original, returns, bool(signed), Poster(*poster)
        )


# Built once, run on the driver (``Database.read_rows``): the single read is the hottest
# reading path. The receipt, its poster and the rights check in one statement.
_READABLE = {
    kind: select(*_READ_COLUMNS)
    .join(Partner, Partner.id == Receipt.partner_id)
    .where(Receipt.id == bindparam("receipt_id"), _may_read(kind))
    for kind in ("partner", "user")
}


# A partner key's read, its check on every request included, in one statement: the enabled
# partner of the key digest, and (outer-joined, so a valid key that may not read the receipt
# still finds its partner: 404, not 401) the receipt, its poster and the right to read it.
_KEY_PARTNER = aliased(Partner, name="key_partner")
_READABLE_WITH_KEY = (
    select(_KEY_PARTNER.sandbox, *_READ_COLUMNS)
    .select_from(_KEY_PARTNER)
    .outerjoin(
        Receipt,
        and_(Receipt.id == bindparam("receipt_id"), _partner_may_read(_KEY_PARTNER.id.expression)),
    )
    .outerjoin(Partner, Partner.id == Receipt.partner_id)
    .where(holds_the_key(_KEY_PARTNER))
)


def _params(reader: Reader, receipt_id: uuid.UUID) -> tuple[str, dict[str, uuid.UUID]]:
    if reader.user_id is not None:
        return "user", {"user_id": reader.user_id, "receipt_id": receipt_id}
    return "partner", {"partner_id": reader.partner_id, "receipt_id": receipt_id}


def may_read(session: Session, reader: Reader, receipt_id: uuid.UUID) -> bool:
    kind, params = _params(reader, receipt_id)
    return bool(session.scalar(_MAY_READ[kind], params))


async def readable_receipt(db: Database, reader: Reader, receipt_id: uuid.UUID) -> ReadableReceipt:
    """The receipt, if this reader may see it; otherwise 404 exactly as if it did not exist."""
    kind, params = _params(reader, receipt_id)
    rows = await db.read_rows_async(_READABLE[kind], params)
    if not rows or rows[0][1] is not reader.sandbox:
        raise NotFound()
    return ReadableReceipt.of(rows[0])


async def readable_receipt_by_key(
    db: Database, digest: str, receipt_id: uuid.UUID
) -> ReadableReceipt:
    """``readable_receipt`` for the partner of a key digest, the key checked in the same
    statement: 401 for a key no enabled partner holds, then 404 as ``readable_receipt``."""
    params = {"digest": digest, "receipt_id": receipt_id}
    rows = await db.read_rows_async(_READABLE_WITH_KEY, params)
    if not rows:
        raise Unauthorized(INVALID_KEY)
    sandbox, *columns = rows[0]
    if columns[0] is None or columns[1] is not sandbox:
        raise NotFound()
    return ReadableReceipt.of(columns)


async def key_reader(db: Database, digest: str) -> Reader:
    """The partner of a key digest as a reader; 401 when no enabled partner holds it. Off the
    hot paths (the reads check the key in their own statements), so the one key lookup."""
    holder = await db.run_read(look_up_holder, db, digest)
    if holder is None:
        raise Unauthorized(INVALID_KEY)
    return Reader(partner_id=holder.id, sandbox=holder.sandbox)


def _key_partner(column: InstrumentedAttribute[Any]) -> ColumnElement[Any]:
    """``column`` of the enabled partner of ``bindparam("digest")``, as a scalar subquery."""
    return select(column).where(holds_the_key(Partner)).scalar_subquery()


@cache
def _page_query(kind: str, since: bool, after: bool) -> Select[*tuple[Any, ...]]:
    """The list page's statement for a ``user`` reader (bound ``owner`` and ``sandbox``) or the
    partner of a ``key`` (bound ``digest``: its enabled partner found in the same statement),
    with or without ``since`` and a cursor (bound ``since``, ``after_time``, ``after_id``), and
    ``limit``; built once per variant: a list page is the other hot reading path."""
    index: type[ReceiptGrant] | type[ReceiptDelivery]
    sandbox: ColumnElement[Any] = bindparam("sandbox", type_=Boolean)
    if kind == "user":
        index = ReceiptDelivery
        owner = ReceiptDelivery.user_id == bindparam("owner")
    else:  # "key": the enabled partner of bindparam("digest"), found in the same statement
        index = ReceiptGrant
        owner = _readable_by_partner(_key_partner(Partner.id))
        sandbox = _key_partner(Partner.sandbox)
    # The page's keys first (one partner may hold a receipt through several grants), then rows.
    keys = select(index.receipt_time, index.receipt_id).where(owner).distinct()
    if since:
        keys = keys.where(index.receipt_time >= bindparam("since"))
    if after:
        # A row comparison, not ``time < t OR (time = t AND id < i)``: both databases take it as
        # the end of the listing index's range, so a deep page reads only its own rows. Written
        # with OR, the index condition was the owner alone and every newer row was read and
        # filtered out (521 ms at a depth of 239k receipts on PostgreSQL, 0.16 ms as a range).
        # tests/receipts/test_list_plans.py holds both databases to it.
        keys = keys.where(
            tuple_(index.receipt_time, index.receipt_id)
            < tuple_(
                bindparam("after_time", type_=index.receipt_time.type),
                bindparam("after_id", type_=index.receipt_id.type),
            )
        )
    page_keys = (
        keys.order_by(index.receipt_time.desc(), index.receipt_id.desc())
        .limit(bindparam("limit", type_=Integer))
        .subquery()
    )
    return (
        select(
            uuid_text(Receipt.id),
            Receipt.merchant_name,
            Receipt.receipt_timestamp,
            Receipt.total,
            Receipt.currency,
            Receipt.original_receipt_id,
            Receipt.return_count,
        )
        .join(page_keys, page_keys.c.receipt_id == Receipt.id)
        .where(Receipt.sandbox == sandbox)
        .order_by(page_keys.c.receipt_time.desc(), page_keys.c.receipt_id.desc())
    )


Cursor = tuple[datetime, uuid.UUID]


async def list_receipts(
    db: Database,
    reader: Reader,
    *,
    since: datetime | None,
    limit: int,
    after: Cursor | None,
) -> dict[str, Any]:
    """A user-authorized reader's page: newest first by receipt time, ties by receipt id;
    keyset pagination after the cursor's receipt (``decode_cursor``)."""
    assert reader.user_id is not None, "a partner's key lists with list_receipts_by_key"
    params = _page_params(since, limit, after)
    params.update(owner=reader.user_id, sandbox=reader.sandbox)
    query = _page_query("user", since is not None, after is not None)
    rows = await db.read_rows_async(query, params)
    return await _page(db, reader, [_ListedRow(*row) for row in rows], limit)


async def list_receipts_by_key(
    db: Database, digest: str, *, since: datetime | None, limit: int, after: Cursor | None
) -> dict[str, Any]:
    """``list_receipts`` for the partner of a key digest, the key checked by the statement
    that reads the page: only an enabled partner's key finds grants, so a page that is not
    empty proves the key, and an empty one is followed by the key's own check (401, or a
    valid key with nothing to list)."""
    params = _page_params(since, limit, after)
    params["digest"] = digest
    query = _page_query("key", since is not None, after is not None)
    rows = await db.read_rows_async(query, params)
    if not rows:
        await key_reader(db, digest)
    return await _page(db, digest, [_ListedRow(*row) for row in rows], limit)


async def replica_rows(
    replica: Database,
    reader: Reader | str,
    *,
    since: datetime | None,
    limit: int,
    after: Cursor | None,
) -> list[_ListedRow]:
    """A list page's rows read on ``replica``, for a user-authorized ``reader`` (decided on the
    primary) or the partner of a key digest; ``checked_page`` makes the page."""
    params = _page_params(since, limit, after)
    if isinstance(reader, str):
        kind = "key"
        params["digest"] = reader
    else:
        kind = "user"
        params.update(owner=reader.user_id, sandbox=reader.sandbox)
    query = _page_query(kind, since is not None, after is not None)
    return [_ListedRow(*row) for row in await replica.read_rows_async(query, params)]


async def checked_page(
    primary: Database, reader: Reader | str, rows: list[_ListedRow], limit: int
) -> dict[str, Any]:
    """The page of ``rows`` read on a replica (``replica_rows``, not empty), their rights
    checked again on ``primary`` in one statement, the key's included: a row whose right ended
    there is left out, and a key disabled or rotated since is refused (kuitti/replicas.py)."""
    ids = [uuid.UUID(row.id) for row in rows[:limit]]
    params: dict[str, Any]
    if isinstance(reader, str):
        kind, params = "key", {"digest": reader, "ids": ids}
    else:
        kind, params = "user", {"owner": reader.user_id, "ids": ids}
    found = await primary.read_rows_async(_STILL_READABLE[kind], params)
    readable = {row[0] for row in found}
    if not readable and isinstance(reader, str):
        await key_reader(primary, reader)  # 401 for a key disabled or rotated since
    return await _page(primary, reader, rows, limit, readable)


# Which of a page's receipts (bound ``ids``, an array: PostgreSQL, where replicas are) the
# reader may still read, on the primary: the partner of a key digest, or a user.
_STILL_READABLE = {
    "key": select(ReceiptGrant.receipt_id).where(
        ReceiptGrant.receipt_id == any_(bindparam("ids", type_=ARRAY(Uuid))),
        _readable_by_partner(_key_partner(Partner.id)),
    ),
    "user": select(ReceiptDelivery.receipt_id).where(
        ReceiptDelivery.user_id == bindparam("owner"),
        ReceiptDelivery.receipt_id == any_(bindparam("ids", type_=ARRAY(Uuid))),
    ),
}


def _page_params(since: datetime | None, limit: int, after: Cursor | None) -> dict[str, Any]:
    params: dict[str, Any] = {"limit": limit + 1}  # one more: is there a next page?
    if since is not None:
        params["since"] = since
    if after is not None:
        params["after_time"], params["after_id"] = after
    return params


async def _page(
    db: Database,
    reader: Reader | str,
    rows: list[_ListedRow],
    limit: int,
    shown: set[uuid.UUID] | None = None,
) -> dict[str, Any]:
    """The answer from the page's rows (one more than ``limit`` if there is a next page).
    ``reader`` is the reader or a key digest, whose partner is looked up only if the page
    shows relations (they depend on what the reader may read). ``shown``: the rows' ids the
    reader may still read, when the rows came from a replica; the cursor stays the last row's."""
    page = rows[:limit]
    cursor_row = page[-1] if page else None
    if shown is not None:
        page = [row for row in page if uuid.UUID(row.id) in shown]
    relations = await _readable_relations(db, reader, page)
    items = [
        {
            "receipt_id": row.id,
            "merchant_name": row.merchant_name,
            "receipt_time": row.receipt_timestamp,
            "total": row.total,
            "currency": row.currency,
            **relations.get(row.id, {}),
        }
        for row in page
    ]
    next_cursor = None
    if len(rows) > limit and cursor_row is not None:
        # The cursor is the last row's own sort key, which the page already holds: its
        # receipt_time is the instant its receiptTimeStamp names, parsed the same way when it was
        # stored. Selecting the column instead would convert 51 datetimes a page to use one, a
        # fifth of the page's CPU.
        last = cursor_row
        next_cursor = encode_cursor(datetime.fromisoformat(last.receipt_timestamp), last.id)
    return {"receipts": items, "next_cursor": next_cursor}


class _ListedRow(NamedTuple):
    """A row of ``_page_query``, in its column order."""

    id: str
    merchant_name: str
    receipt_timestamp: str
    total: int
    currency: str
    original_receipt_id: uuid.UUID | None
    return_count: int


async def _readable_relations(
    db: Database, reader: Reader | str, page: Sequence[_ListedRow]
) -> dict[str, dict[str, Any]]:
    """A page's returns and purchases linked to each other (``posting/returns.py``), as the
    list shows them: ``original_receipt_id`` on a return, ``return_receipt_ids`` on a purchase,
    each only where the reader may read the other receipt too. No query for a page without."""
    originals = {
        uuid.UUID(row.id): row.original_receipt_id for row in page if row.original_receipt_id
    }
    purchases = [uuid.UUID(row.id) for row in page if row.return_count]
    if not originals and not purchases:
        return {}
    if isinstance(reader, str):
        reader = await key_reader(db, reader)
    return await db.run_read(_relations_shown, db, reader, originals, purchases)


def _relations_shown(
    db: Database,
    reader: Reader,
    originals: dict[uuid.UUID, uuid.UUID],
    purchases: list[uuid.UUID],
) -> dict[str, dict[str, Any]]:
    returns: dict[uuid.UUID, list[uuid.UUID]] = {}
    with db.session(write=False) as session:
        if purchases:
            linked = session.execute(
                select(Receipt.original_receipt_id, Receipt.id)
                .where(Receipt.original_receipt_id.in_(purchases))
                .order_by(Receipt.receipt_time, Receipt.id)
            )
            for purchase, linked_return in linked:
                assert purchase is not None
                returns.setdefault(purchase, []).append(linked_return)
        wanted = set(originals.values()) | {r for ids in returns.values() for r in ids}
        if not wanted:
            return {}
        readable = _readable_ids(session, reader, wanted)
    relations: dict[str, dict[str, Any]] = {}
    for receipt_id, original in originals.items():
        if original in readable:
            relations.setdefault(str(receipt_id), {})["original_receipt_id"] = str(original)
    for purchase, ids in returns.items():
        shown = [str(r) for r in ids if r in readable]
        if shown:
            relations.setdefault(str(purchase), {})["return_receipt_ids"] = shown
    return relations


def _readable_ids(session: Session, reader: Reader, ids: set[uuid.UUID]) -> set[uuid.UUID]:
    return set(session.scalars(_readable_ids_query(reader, ids)))


def _readable_ids_query(reader: Reader, ids: set[uuid.UUID]) -> Select[uuid.UUID]:
    if reader.user_id is not None:
        return select(ReceiptDelivery.receipt_id).where(
            ReceiptDelivery.user_id == reader.user_id, ReceiptDelivery.receipt_id.in_(ids)
        )
    return select(ReceiptGrant.receipt_id).where(
        ReceiptGrant.receipt_id.in_(ids), _readable_by_partner(reader.partner_id)
    )


def encode_cursor(moment: datetime, receipt_id: str) -> str:
    raw = f"{moment.isoformat()}|{receipt_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        moment_text, id_text = raw.split("|")
        moment = datetime.fromisoformat(moment_text)
        if moment.tzinfo is None:
            raise ValueError("naive")
        return moment, uuid.UUID(id_text)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise InvalidRequest(
            [ErrorDetail("invalid_value", "cursor: not a cursor this service gave out.")]
        ) from None
