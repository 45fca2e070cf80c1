"""Ingesting receipts (reading them: ``kuitti.receipts.readers``).

Two plain functions store receipts, both inside the caller's unit of work, so a receipt, its
links, its deliveries and the outbox rows they cause commit together or not at all:

- ``create_receipts`` stores a batch of validated posts (what the ingest writer,
  ``kuitti.posting.ingest``, commits together), each prepared by ``prepare_posting`` on the
  event loop right after its validation. It checks each post's partner again in this
  transaction, then writes every receipt that needs nothing but rows of its own (no token but
  RECEIPT_ID, no identifier or idempotency key already used) with one multi-row insert per
  table, and hands each of the others to ``create_receipt`` in a savepoint of its own.
- ``create_receipt`` stores one receipt, whatever its tokens: resends and duplicates of a
  RECEIPT_ID, idempotent replays, delivery through QR codes, cards, user tokens and e-mail.

Both store a new receipt's rows as ``receipt_rows`` builds them; ``create_receipt`` then adds
what only some receipts need (a return's link to its original, token deliveries).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import InstrumentedAttribute, Session

from kuitti import links, locks, receipt_log, signatures
from kuitti.cards.matching import card_payment_inserts, card_payment_rows
from kuitti.config import Settings
from kuitti.db import database_of
from kuitti.errors import Conflict, KuittiError
from kuitti.ids import new_id
from kuitti.metrics import RECEIPT_TOKENS
from kuitti.models import (
    IdempotencyRecord,
    Partner,
    Receipt,
    ReceiptGrant,
    ReceiptLink,
    ReceiptLogBatch,
)
from kuitti.models.receipts import GrantReason
from kuitti.partners.keys import KeyHolder, key_holder_reads, key_holders_read
from kuitti.posting import returns
from kuitti.posting.checks import LinkPlan, TokenCheck, check_body, check_tokens
from kuitti.posting.tokens import Status, TokenStatus, resolve_tokens
from kuitti.receipts.validation import ReceiptRequest, TokenType
from kuitti.security import SecretBox


@dataclass
class CreatedReceipt:
    receipt_id: uuid.UUID
    receipt_links: list[str]
    tokens: list[TokenStatus]
    receipt_web_url: str
    replayed: bool = False
    original: returns.OriginalOutcome | None = None

    def as_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "receipt_id": str(self.receipt_id),
            "receipt_links": self.receipt_links,
            "tokens": [{"type": t.type.value, "status": t.status} for t in self.tokens],
            "receipt_web_url": self.receipt_web_url,
        }
        if self.original is not None:
            body["original"] = self.original.as_json()
        return body


@dataclass(frozen=True)
class IdempotencyKey:
    key: str
    request_hash: str


@dataclass(frozen=True)
class Posting:
    """One validated create-receipt request, as its key holder was when it was validated."""

    holder: KeyHolder
    request: ReceiptRequest
    now: datetime
    idempotency: IdempotencyKey | None = None


@dataclass
class Outcome:
    """What became of one posting: an answer, an error to answer with, or ``stale`` when its
    partner changed since the request was validated, or the key that signed its rows no longer
    signs (nothing was stored; validate and sign again)."""

    answer: tuple[int, dict[str, Any]] | None = None
    error: Exception | None = None
    stale: bool = False


_STORED = "kuitti.receipts_stored"


def stored_receipts(session: Session) -> int:
    """How many new receipts this unit of work has stored so far (resends and idempotent
    replays not counted): what the caller adds to ``kuitti_receipts_created_total`` once the
    unit has committed."""
    return int(session.info.get(_STORED, 0))


def _count_stored(session: Session, count: int) -> None:
    session.info[_STORED] = stored_receipts(session) + count


def create_receipt(
    session: Session,
    settings: Settings,
    partner: Partner,
    request: ReceiptRequest,
    *,
    now: datetime,
    idempotency: IdempotencyKey | None = None,
) -> tuple[int, dict[str, Any]]:
    """Store a validated receipt, deliver it through its tokens and card-linking.

    Returns the HTTP status and body; a replayed idempotent request returns the first answer.
    """
    if idempotency is not None:
        locks.acquire(session, "idempotency", str(partner.id), idempotency.key)
        record = session.get(IdempotencyRecord, (partner.id, idempotency.key))
        if record is not None:
            if record.request_hash != idempotency.request_hash:
                raise Conflict(
                    "This Idempotency-Key was already used with a different body.",
                    code="idempotency_key_reused",
                )
            return record.status_code, orjson.loads(record.response_body)

    # The same checks as the dry run (POST /api/v1/receipts/validate): see posting/checks.py.
    checked = check_tokens(session, settings, partner, request, lock=True)
    if checked.resend_of is not None:
        result = _replay(session, settings, checked)
    else:
        result = _store(session, settings, partner, request, checked.plans, now=now)
    body = result.as_json()
    if idempotency is not None:
        session.add(IdempotencyRecord(**_idempotency_row(partner.id, idempotency, body, now)))
    return 200, body


def _replay(session: Session, settings: Settings, checked: TokenCheck) -> CreatedReceipt:
    """A POS resending an unchanged RECEIPT_ID receipt gets the original id back."""
    assert checked.resend_of is not None
    original = session.get(Receipt, checked.resend_of)
    assert original is not None
    return CreatedReceipt(
        receipt_id=original.id,
        receipt_links=[p.url for p in checked.plans],
        tokens=[TokenStatus(TokenType(t["type"]), t["status"]) for t in original.token_statuses],
        receipt_web_url=links.private_link(settings, original.id),
        replayed=True,
        original=returns.stored_outcome(original),
    )


def _store(
    session: Session,
    settings: Settings,
    partner: Partner,
    request: ReceiptRequest,
    plans: list[LinkPlan],
    *,
    now: datetime,
) -> CreatedReceipt:
    """Store a new receipt's rows, then what only some receipts need: the link of a return to
    its original, and the deliveries of its tokens.

    Whom the tokens reach and which original a return names are read first, so that the
    receipt's row is inserted once as it stays (its tokens' statuses, its original): an update
    of it afterwards would be a second version of the row (on PostgreSQL a dead tuple, its WAL
    and a page read). The deliveries refer to the row, so they are written after it."""
    doc = request.receipt
    found = returns.find_original(session, partner, doc) if doc.names_original else None
    deliveries = resolve_tokens(session, settings, request.tokens, sandbox=partner.sandbox, now=now)
    key = signatures.current_key(session, SecretBox(settings.resolved_secret_key), now=now)
    rows = receipt_rows(partner, request, _receipt_ids(request), deliveries.statuses, now=now)
    rows.sign(key, settings.issuer)
    receipt = Receipt(**rows.receipt)
    original = found.original if found is not None else None
    if original is not None:
        receipt.original_receipt_id = original.id
    session.add(receipt)
    receipt_log.enter(session, [receipt], now=now)
    session.add(ReceiptGrant(**rows.grant))
    session.flush()
    session.add_all([ReceiptLink(**link) for link in rows.links])
    if original is not None:
        returns.follow_original(session, receipt, original, now=now)
    deliveries.apply(session, settings, receipt, now=now)
    database_of(session).insert_rows(session, card_payment_inserts(session, rows.payments))
    _count_stored(session, 1)
    return CreatedReceipt(
        receipt_id=receipt.id,
        receipt_links=[p.url for p in plans],
        tokens=deliveries.statuses,
        receipt_web_url=links.private_link(settings, receipt.id),
        original=found.outcome if found is not None else None,
    )


@dataclass(frozen=True)
class ReceiptRows:
    """The rows that store one new receipt, whichever path stores it (``receipt_rows``)."""

    receipt: dict[str, Any]
    grant: dict[str, Any]
    """The poster's grant: a new receipt has no grants yet, so it needs no existence check."""
    links: list[dict[str, Any]]
    payments: list[dict[str, Any]]
    """Its CARD payments (``card_payment_inserts`` adds their matching queue entries)."""

    def sign(self, key: signatures.LoadedKey, issuer: str) -> None:
        """Sign the receipt's document with ``key`` as ``issuer`` (``kuitti.signatures``),
        unless it is signed already."""
        receipt = self.receipt
        if receipt["signature"] is None:
            receipt["signature"] = signatures.sign(
                key,
                receipt["document"],
                receipt_id=receipt["id"],
                partner_id=receipt["partner_id"],
                issuer=issuer,
                now=receipt["created_at"],
            )


def receipt_rows(
    poster: Partner | KeyHolder,
    request: ReceiptRequest,
    ids: list[tuple[str, str]],
    statuses: list[TokenStatus],
    *,
    now: datetime,
) -> ReceiptRows:
    """The rows of a new receipt of ``request`` posted by ``poster``, linked under its
    RECEIPT_IDs ``ids`` (namespace, identifier), with its tokens' ``statuses``;
    its signature is made by ``ReceiptRows.sign`` before the rows are stored.

    The one builder of a receipt's rows: the batch inserts them as they are, ``_store`` as
    models, before it adds what only some receipts need."""
    doc = request.receipt
    receipt_id = new_id()
    shareable = {(t.namespace, t.value) for t in request.tokens if t.shareable}
    document = request.document_bytes()
    return ReceiptRows(
        receipt={
            "id": receipt_id,
            "partner_id": poster.id,
            # The bytes as posted (UTF8Text: bytes go in as they are), served as service_json.
            "document": document,
            "signature": None,
            "log_batch_id": None,  # its batch's, once the writer knows it (kuitti.receipt_log)
            "document_hash": request.resend_hash,
            "receipt_number": doc.receiptNumber,
            "receipt_time": doc.receipt_time,
            "receipt_timestamp": doc.receiptTimeStamp,
            "merchant_name": doc.merchant.name,
            "total": doc.totalPriceIncVAT,
            "currency": doc.currencyISOCode,
            "token_statuses": _statuses_json(statuses),
            "return_count": 0,
            "created_at": now,
            "sandbox": poster.sandbox,
        },
        grant={
            "id": new_id(),
            "partner_id": poster.id,
            "receipt_id": receipt_id,
            "receipt_time": doc.receipt_time,
            "reason": GrantReason.POSTED,
        },
        links=[
            {
                "namespace": namespace,
                "identifier": identifier,
                "receipt_id": receipt_id,
                "shareable": (namespace, identifier) in shareable,
            }
            for namespace, identifier in ids
        ],
        payments=card_payment_rows(receipt_id, doc, sandbox=poster.sandbox, now=now),
    )


def _statuses_json(statuses: list[TokenStatus]) -> list[dict[str, Any]]:
    return [{"type": t.type.value, "status": t.status} for t in statuses]


def _idempotency_row(
    partner_id: uuid.UUID, idempotency: IdempotencyKey, body: dict[str, Any], now: datetime
) -> dict[str, Any]:
    """The record of a post's first answer ``body``, replayed for the same key and body."""
    return {
        "partner_id": partner_id,
        "key": idempotency.key,
        "request_hash": idempotency.request_hash,
        "status_code": 200,
        "response_body": orjson.dumps(body).decode(),
        "created_at": now,
    }


@dataclass(frozen=True)
class PlainRows:
    """The rows of a posting that needs nothing but rows of its own (no token but RECEIPT_ID of
    its own namespaces, no identifier twice, no original named), and its answer.

    Built by ``prepare_posting``, outside the writer's transaction: on SQLite that transaction
    holds the database's one write lock, which every other process's writer waits for, so it
    does nothing that needs no database."""

    rows: ReceiptRows
    record: dict[str, Any] | None
    answer: tuple[int, dict[str, Any]]


@dataclass(frozen=True)
class Prepared:
    """A posting as the ingest writer takes it: its rows when plain inserts may store it, else
    its validated request.

    A posting with rows keeps its body rather than its request, so that the parsed document and
    its models are freed on the event loop as soon as the rows are built, while they are still
    in the CPU's caches, instead of after the commit (docs/performance.md). The rare posting
    with rows that ``create_receipt`` must store after all (its RECEIPT_ID or idempotency key
    was taken meanwhile) is read again from its body."""

    holder: KeyHolder
    now: datetime
    idempotency: IdempotencyKey | None
    receipt_ids: list[tuple[str, str]]
    """Its RECEIPT_ID tokens, as (namespace, identifier)."""
    rows: PlainRows | None
    key: signatures.LoadedKey
    """The key that signs its rows (``sign_postings``)."""
    body: bytes
    validated: ReceiptRequest | None
    """The request, kept only when there are no rows."""

    def request(self) -> ReceiptRequest:
        """The validated request (read again from the body when it was not kept)."""
        if self.validated is not None:
            return self.validated
        return check_body(self.body, self.holder)


def prepare_posting(
    settings: Settings, posting: Posting, body: bytes, key: signatures.LoadedKey
) -> Prepared:
    """``create_receipts``' work for ``posting`` that needs no database (``body`` is the one it
    was validated from; ``key`` signs its receipt)."""
    ids = _receipt_ids(posting.request)
    rows = _plain_rows(settings, posting, ids)
    return Prepared(
        holder=posting.holder,
        now=posting.now,
        idempotency=posting.idempotency,
        receipt_ids=ids,
        rows=rows,
        key=key,
        body=body,
        validated=posting.request if rows is None else None,
    )


def sign_postings(settings: Settings, batch: list[Prepared]) -> None:
    """Sign the rows of ``batch``'s postings, one after the other, before the writer's
    transaction begins (on SQLite it holds the one write lock).

    Here rather than as each posting's rows are built: right after a receipt's validation,
    which has taken OpenSSL's tables out of the CPU's caches, a signature costs two to four
    times what it costs right after another signature (``bench/ingest_inprocess.py
    --signing-turns``, docs/performance.md). A batch's rows are signed once, whatever becomes
    of the batch."""
    for prepared in batch:
        if prepared.rows is not None:
            prepared.rows.rows.sign(prepared.key, settings.issuer)


def create_receipts(session: Session, settings: Settings, batch: list[Prepared]) -> list[Outcome]:
    """Store a batch of validated, prepared posts in the caller's unit of work; one outcome per
    posting.

    A receipt's own errors (a duplicate RECEIPT_ID, an idempotency key reused) are its outcome
    and roll back only its savepoint; any other error propagates, and the caller rolls the whole
    batch back (``kuitti.posting.ingest`` then writes each posting alone)."""
    sign_postings(settings, batch)  # a no-op after the writer's, made before its transaction
    # The batch's key holders and the signing key as they are now, in one round trip.
    digests = list({p.holder.key_digest for p in batch})
    *holder_rows, kid_rows = database_of(session).session_rows_together(
        session, [*key_holder_reads(digests), signatures.SIGNING_KID_READ]
    )
    holders = key_holders_read(digests, holder_rows)
    kid = signatures.kid_read(kid_rows)
    outcomes = [Outcome() for _ in batch]
    current: list[int] = []
    for index, prepared in enumerate(batch):
        if holders.get(prepared.holder.key_digest) != prepared.holder or (
            prepared.rows is not None and prepared.key.kid != kid
        ):
            outcomes[index].stale = True
        else:
            current.append(index)
    together, alone = _sort_postings(session, [batch[i] for i in current])
    plain: list[PlainRows] = []
    for i in together:
        rows = batch[current[i]].rows
        assert rows is not None  # _sort_postings keeps together only postings with rows
        plain.append(rows)
        outcomes[current[i]].answer = rows.answer
    _store_together(session, plain)
    for i in alone:
        prepared = batch[current[i]]
        stored_before = stored_receipts(session)
        try:
            with session.begin_nested():
                partner = session.get(Partner, prepared.holder.id)
                assert partner is not None
                outcomes[current[i]].answer = create_receipt(
                    session,
                    settings,
                    partner,
                    prepared.request(),
                    now=prepared.now,
                    idempotency=prepared.idempotency,
                )
        except KuittiError as exc:
            outcomes[current[i]].error = exc
            session.info[_STORED] = stored_before  # its savepoint was rolled back
    return outcomes


def lost_race(error: BaseException) -> bool:
    """Whether ``error`` is PostgreSQL's unique violation or deadlock: another transaction
    stored the same RECEIPT_ID or idempotency key first (a batch's plain inserts take no lock)
    and has committed, or the two waited for each other. Writing the posting again in a new
    transaction then finds the winner's rows and answers as a resend, a replay or the
    documented conflict. SQLite has one writer at a time: its writers never race."""
    return isinstance(error, DBAPIError) and getattr(error.orig, "sqlstate", None) in {
        "23505",  # unique_violation
        "40P01",  # deadlock_detected
    }


def _receipt_ids(request: ReceiptRequest) -> list[tuple[str, str]]:
    return [
        (t.namespace, t.value)
        for t in request.tokens
        if t.type is TokenType.RECEIPT_ID and t.namespace is not None
    ]


def _sort_postings(session: Session, batch: list[Prepared]) -> tuple[list[int], list[int]]:
    """Which prepared postings can be stored together with plain inserts, and which need
    ``create_receipt``: those without plain rows, and those whose identifier or idempotency key
    is already used, in the database or by an earlier posting of the batch. Two queries at
    most."""
    used_ids: set[tuple[Any, Any]] = _taken(
        session,
        ReceiptLink.namespace,
        ReceiptLink.identifier,
        {pair for p in batch for pair in p.receipt_ids},
    )
    used_keys = _taken(
        session,
        IdempotencyRecord.partner_id,
        IdempotencyRecord.key,
        {(p.holder.id, p.idempotency.key) for p in batch if p.idempotency is not None},
    )
    together: list[int] = []
    alone: list[int] = []
    for index, prepared in enumerate(batch):
        ids = prepared.receipt_ids
        key = (prepared.holder.id, prepared.idempotency.key) if prepared.idempotency else None
        if prepared.rows is not None and used_ids.isdisjoint(ids) and key not in used_keys:
            together.append(index)
            used_ids.update(ids)
            if key is not None:
                used_keys.add(key)
        else:
            alone.append(index)
    return together, alone


def _taken(
    session: Session,
    owner: InstrumentedAttribute[Any],
    name: InstrumentedAttribute[str],
    pairs: set[tuple[Any, str]],
) -> set[tuple[Any, Any]]:
    """The pairs among ``pairs`` already stored in a table whose primary key is (``owner``,
    ``name``). Both columns are named, so both databases search the key instead of scanning
    (a row-value ``IN`` of the pairs is scanned by SQLite): every owner asked with every name
    asked, then only the pairs asked are kept."""
    if not pairs:
        return set()
    query = select(owner, name).where(
        owner.in_({o for o, _ in pairs}), name.in_({n for _, n in pairs})
    )
    return {(row[0], row[1]) for row in session.execute(query)} & pairs


def _plain_rows(
    settings: Settings, posting: Posting, ids: list[tuple[str, str]]
) -> PlainRows | None:
    """The rows of ``posting`` (whose RECEIPT_IDs are ``ids``) if it needs nothing but rows of
    its own, not signed yet; None otherwise."""
    request, now, holder = posting.request, posting.now, posting.holder
    if not (
        all(t.type is TokenType.RECEIPT_ID for t in request.tokens)
        and all(namespace in holder.namespace_names for namespace, _ in ids)
        and len(set(ids)) == len(ids)
        and not request.receipt.names_original
    ):
        return None
    statuses = [TokenStatus(TokenType.RECEIPT_ID, Status.LINK_CREATED) for _ in ids]
    rows = receipt_rows(holder, request, ids, statuses, now=now)
    receipt_id = rows.receipt["id"]
    body = CreatedReceipt(
        receipt_id=receipt_id,
        receipt_links=[links.namespace_link(settings, ns, value) for ns, value in ids],
        tokens=statuses,
        receipt_web_url=links.private_link(settings, receipt_id),
    ).as_json()
    record = None
    if posting.idempotency is not None:
        record = _idempotency_row(holder.id, posting.idempotency, body, now)
    return PlainRows(rows=rows, record=record, answer=(200, body))


def _store_together(session: Session, rows: list[PlainRows]) -> None:
    """Insert prepared receipts, and their batch of the receipt log: one statement per
    table."""
    if not rows:
        return
    receipt_links = [link for r in rows for link in r.rows.links]
    payments = [payment for r in rows for payment in r.rows.payments]
    receipts = [r.rows.receipt for r in rows]
    batch = receipt_log.enter_rows(receipts, now=receipts[-1]["created_at"])
    database_of(session).insert_rows(
        session,
        {
            Receipt: receipts,
            ReceiptLogBatch: [batch],
            ReceiptGrant: [r.rows.grant for r in rows],
            ReceiptLink: receipt_links,
            IdempotencyRecord: [r.record for r in rows if r.record is not None],
            **card_payment_inserts(session, payments),
        },
    )
    if receipt_links:
        RECEIPT_TOKENS.labels(TokenType.RECEIPT_ID.value, Status.LINK_CREATED.value).inc(
            len(receipt_links)
        )
    _count_stored(session, len(rows))
