"""The receipt post, from the request's headers and body to the committed answer.

The request path (docs/architecture.md, "The receipt post"):

1. On the event loop, with no thread hop: the API key's holder (``KeyHolder``, remembered per
   process, looked up in a thread only on first sight), the role, the headers, the validation
   of the body, and the rows that store it (``service.prepare_posting``), after which the
   parsed document is freed.
2. The prepared posting joins the queue of this process's writer and waits. The writer takes
   every posting waiting and stores them in one transaction (``service.create_receipts``: the
   key holders read again, then a few multi-row inserts), commits once, and only then answers
   each of them. While it writes, the next postings gather for the next commit; under load it
   also lets them gather for a moment before it starts (``GATHER_AT_LEAST``).
3. If the batch fails as a whole (a unique row taken by another process meanwhile, a database
   error), it is rolled back and each posting is written alone, so one bad receipt fails only
   its own request. A posting alone that lost the race for its RECEIPT_ID or idempotency key
   is written again, which finds the winner's rows: it answers as the winner's resend or
   replay, or with the documented conflict.

Every 200 is sent after the commit that stored it; a crash before the commit loses the
requests in flight, which then never got an answer. An error answered from step 1 with a
remembered key holder is answered only after a fresh lookup agrees (so a rotated key gets 401,
not a validation error), and a posting whose partner changed is validated again from a fresh
lookup.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import datetime

import anyio.to_thread

from kuitti import signatures
from kuitti.config import Settings
from kuitti.db import Database
from kuitti.errors import (
    DatabaseUnavailable,
    ErrorDetail,
    InvalidRequest,
    KuittiError,
    Unauthorized,
)
from kuitti.logs import log
from kuitti.metrics import INGEST_BATCH, RECEIPTS_CREATED
from kuitti.models import PartnerRole
from kuitti.partners.keys import (
    INVALID_KEY,
    KeyHolder,
    KeyHolderCache,
    key_digest,
    look_up_holder,
    require_json,
    require_role,
)
from kuitti.posting.checks import check_body
from kuitti.posting.service import (
    IdempotencyKey,
    Outcome,
    Posting,
    Prepared,
    create_receipts,
    lost_race,
    prepare_posting,
    sign_postings,
    stored_receipts,
)
from kuitti.services import Services

IDEMPOTENCY_KEY_MAX = 255
MAX_BATCH = 256
ATTEMPTS = 3
GATHER_AT_LEAST = 16
"""Under load (the last batch held this many postings or more), the writer lets postings gather
until this many wait, for at most ``GATHER_SECONDS``, before it takes the next batch. A batch
has a fixed cost (a transaction, its statements, the hop to the writer's thread and back: about
1.5–2 ms of the writer's and PostgreSQL's CPU together), and a writer that takes whatever waits
runs as often as it can: under load it would pay that cost for batches of one to four
postings (docs/performance.md). At light load (smaller batches) a posting is written at once;
only the first after a burst may wait the moment."""
GATHER_SECONDS = 0.004


class Ingest:
    """One process's receipt posts: its remembered key holders and its group-commit writer."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.key_holders = KeyHolderCache()
        self.signer = signatures.Signer(services.db, services.settings)
        self._waiting: list[tuple[Prepared, asyncio.Future[Outcome]]] = []
        self._writer: asyncio.Task[None] | None = None
        self._writing = 0
        self._last_batch = 0
        self._gathered: asyncio.Future[None] | None = None

    @property
    def in_flight(self) -> int:
        """Postings waiting for the writer or being written now."""
        return len(self._waiting) + self._writing

    async def post(
        self,
        body: bytes,
        *,
        authorization: str | None,
        content_type: str | None,
        idempotency_key: str | None,
    ) -> tuple[int, dict[str, object]]:
        """The status and body of the answer; a ``KuittiError`` for an error answer."""
        now = self.services.clock.now()
        digest = key_digest(authorization)
        for attempt in range(ATTEMPTS):
            key = self.signer.key
            if key is None:
                key = await anyio.to_thread.run_sync(self.signer.load, now)
            holder = None if attempt else self.key_holders.get(digest)
            looked_up = holder is None
            if holder is None:
                holder = await self._look_up(digest)
            try:
                prepared = self._prepared(holder, body, content_type, idempotency_key, now, key)
            except KuittiError:
                if looked_up:
                    raise
                continue  # answer only what a fresh lookup agrees with
            outcome = await self._write(prepared)
            if outcome.stale:  # its partner or the signing key changed: ask again
                self.key_holders.forget(digest)
                self.signer.forget()
                continue
            if outcome.error is not None:
                raise outcome.error
            assert outcome.answer is not None
            return outcome.answer
        raise RuntimeError(
            "the partner of this API key or the signing key kept changing while the receipt was "
            "posted"
        )

    async def _look_up(self, digest: str) -> KeyHolder:
        holder = await anyio.to_thread.run_sync(look_up_holder, self.services.db, digest)
        if holder is None:
            self.key_holders.forget(digest)
            raise Unauthorized(INVALID_KEY)
        self.key_holders.put(holder)
        return holder

    def _prepared(
        self,
        holder: KeyHolder,
        body: bytes,
        content_type: str | None,
        idempotency_key: str | None,
        now: datetime,
        key: signatures.LoadedKey,
    ) -> Prepared:
        """The post validated and its rows built; only what the writer needs outlives this call
        (``service.Prepared``)."""
        posting = _validated(holder, body, content_type, idempotency_key, now)
        return prepare_posting(self.services.settings, posting, body, key)

    async def _write(self, posting: Prepared) -> Outcome:
        future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        self._waiting.append((posting, future))
        gathered = self._gathered
        if gathered is not None and len(self._waiting) >= GATHER_AT_LEAST and not gathered.done():
            gathered.set_result(None)
        if self._writer is None:
            self._writer = asyncio.create_task(self._write_waiting())
        return await future

    async def _write_waiting(self) -> None:
        """Write batches until nothing waits; one batch at a time, in one thread."""
        batch: list[tuple[Prepared, asyncio.Future[Outcome]]] = []
        try:
            while self._waiting:
                await self._gather()
                batch, self._waiting = self._waiting[:MAX_BATCH], self._waiting[MAX_BATCH:]
                self._writing = self._last_batch = len(batch)
                outcomes = await anyio.to_thread.run_sync(
                    write_batch,
                    self.services.db,
                    self.services.settings,
                    [posting for posting, _ in batch],
                )
                for (_, future), outcome in zip(batch, outcomes, strict=True):
                    if not future.done():
                        future.set_result(outcome)
                batch = []
        except BaseException:
            # Cancelled (the server is stopping): nobody waits for an answer for ever.
            for _, future in batch + self._waiting:
                future.cancel()
            self._waiting = []
            raise
        finally:
            self._writer = None
            self._writing = 0

    async def _gather(self) -> None:
        """After a batch of ``GATHER_AT_LEAST`` or more, until that many postings wait or
        ``GATHER_SECONDS`` have passed."""
        if self._last_batch < GATHER_AT_LEAST or len(self._waiting) >= GATHER_AT_LEAST:
            return
        self._gathered = asyncio.get_running_loop().create_future()
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._gathered, GATHER_SECONDS)
        finally:
            self._gathered = None


def _validated(
    holder: KeyHolder,
    body: bytes,
    content_type: str | None,
    idempotency_key: str | None,
    now: datetime,
) -> Posting:
    """The checks of a receipt post, in the order their errors are answered."""
    require_role(holder, PartnerRole.MERCHANT)
    if idempotency_key is not None and len(idempotency_key) > IDEMPOTENCY_KEY_MAX:
        raise InvalidRequest(
            [
                ErrorDetail(
                    "invalid_value",
                    "header.idempotency-key: String should have at most "
                    f"{IDEMPOTENCY_KEY_MAX} characters",
                )
            ]
        )
    require_json(content_type)
    request = check_body(body, holder)
    idempotency = None
    if idempotency_key:
        idempotency = IdempotencyKey(idempotency_key, request.body_hash)
    return Posting(holder, request, now, idempotency)


def write_batch(db: Database, settings: Settings, postings: list[Prepared]) -> list[Outcome]:
    """Store ``postings`` in one transaction; if it fails as a whole, each one alone. A posting
    alone that lost a race for a unique row to another process's transaction (``lost_race``)
    is written again, and then gets the winner's answer or the documented conflict."""
    sign_postings(settings, postings)
    for attempt in range(ATTEMPTS):
        try:
            with db.session() as session:
                outcomes = create_receipts(session, settings, postings)
                stored = stored_receipts(session)
            RECEIPTS_CREATED.inc(stored)  # committed
            INGEST_BATCH.observe(len(postings))
            return outcomes
        except Exception as exc:
            if isinstance(exc, DatabaseUnavailable):
                # The database away: each posting is answered this error (a 503), which writing
                # them one by one would only repeat.
                return [Outcome(error=exc) for _ in postings]
            if len(postings) == 1:
                if attempt + 1 < ATTEMPTS and lost_race(exc):
                    continue
                return [Outcome(error=exc)]
            log.warning(
                "receipt batch failed; writing its receipts one by one",
                receipts=len(postings),
                error=type(exc).__name__,
            )
            break
    return [write_batch(db, settings, [posting])[0] for posting in postings]
