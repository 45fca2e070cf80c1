"""The webhook worker: sends due webhooks from the outbox to partners' URLs. (``kuitti.worker``
runs it beside the e-mail sender and the card-linking re-check.)

One delivery goes through three steps, each usable on its own (tests call them directly):

1. ``claim_due`` — in one short write transaction, pick due rows (``FOR UPDATE SKIP LOCKED`` on
   PostgreSQL, so concurrent workers never pick the same row; SQLite serialises writers) and lease
   them: ``lease_expires_at`` = now + timeout + margin, and a fresh ``lease_token``. A worker that
   dies after claiming leaves the row to whoever finds it after the lease.
2. ``send`` — one HTTP POST of the stored body bytes with the signed headers, bounded by the
   timeout in total; no redirects are followed. Nothing touches the database meanwhile.
3. ``record_outcomes`` — in one write transaction, log every attempt and move each delivery on:
   ``delivered`` on 2xx, else pending again after the next delay of the retry schedule (±10 %
   jitter), or ``failed`` after the last. A row is moved only while the lease token is still the
   one this worker set (a worker that overran its lease cannot undo another's result).

``run_webhooks`` runs these as a pipeline: up to ``MAX_IN_FLIGHT`` calls at once, at most
``MAX_IN_FLIGHT_PER_PARTNER`` to one partner (a slow partner cannot hold up the others), the
outcomes of the calls finished meanwhile written in the same transaction as the next claim. It
waits for work on an in-process wake-up (a commit that queued a webhook), PostgreSQL ``LISTEN``,
or a short poll (retries falling due, other processes on SQLite).

Why one long module: the three steps and the pipeline share the lease, the in-flight limits and
the batch window, and a crash between any two of them must lose nothing; reading them side by
side is how that is checked.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import ssl
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache
from typing import TypeVar

import aiohttp
import certifi
from sqlalchemy import (
    Connection,
    ScalarSelect,
    Update,
    bindparam,
    exists,
    func,
    select,
)
from sqlalchemy.orm import InstrumentedAttribute, Session

from kuitti import metrics, outbox
from kuitti.config import Settings
from kuitti.db import UTCDateTime, database_of
from kuitti.logs import log
from kuitti.models import Partner, WebhookAttempt, WebhookDelivery
from kuitti.models.outbox import DeliveryStatus
from kuitti.outbox import Lease
from kuitti.security import SecretBox
from kuitti.services import Services
from kuitti.webhooks.signing import InvalidWebhookKey, webhook_headers
from kuitti.webhooks.ssrf import TargetGuard, TargetRefused

# Calls in flight, in all and to one partner (a slow partner cannot hold up the others). The
# benchmark's receivers answer at once, so it rarely reaches them (docs/performance.md,
# "Webhooks").
MAX_IN_FLIGHT = 32
MAX_IN_FLIGHT_PER_PARTNER = 8
CLAIM_BATCH = MAX_IN_FLIGHT
LEASE_MARGIN_SECONDS = 30.0
POLL_SECONDS = 0.25
# How long a wake-up waits for more events before claiming, when there is no backlog: at most
# this much lag, for one claim and one outcome transaction shared by the window's deliveries
# (docs/performance.md, "Webhooks").
BATCH_WINDOW_SECONDS = 0.02
DB_RETRY_MAX_SECONDS = 5.0
RESPONSE_BODY_LIMIT_BYTES = 64 * 1024
ERROR_MAX_CHARS = 1000

WallTime = Callable[[], float]
T = TypeVar("T")


@dataclass(frozen=True)
class Claim:
    """A leased delivery with everything needed to send it."""

    delivery_id: uuid.UUID
    partner_id: uuid.UUID
    notification_type: str
    url: str | None
    webhook_key: str | None
    bare_authorization: bool
    body: bytes
    attempt_count: int
    created_at: datetime
    lease_token: str
    key_sealed_elsewhere: bool = False
    """The partner has a webhook key that this server's secret cannot open."""

    @property
    def webhook_id(self) -> str:
        return str(self.delivery_id)


@dataclass(frozen=True)
class Outcome:
    """The result of one attempt."""

    claim: Claim
    at: datetime
    finished_at: datetime
    status_code: int | None
    latency_ms: int
    error: str | None

    @property
    def ok(self) -> bool:
        return self.error is None


def lease_seconds(settings: Settings) -> float:
    """Long enough for one call (bounded by the timeout) and recording its outcome."""
    return settings.webhook_timeout_seconds + LEASE_MARGIN_SECONDS


@lru_cache(maxsize=4096)
def _open_key(server_secret: str, sealed: str) -> str:
    return SecretBox(server_secret).open(sealed)


def _room_used(
    candidates: Sequence[tuple[uuid.UUID, uuid.UUID]],
    busy: dict[uuid.UUID, int],
    per_partner: int,
) -> int:
    """How many of ``candidates`` the per-partner limits would let through."""
    taken: Counter[uuid.UUID] = Counter(busy)
    count = 0
    for _id, partner_id in candidates:
        if taken[partner_id] < per_partner:
            taken[partner_id] += 1
            count += 1
    return count


# The claim's statements, built once: a claim is a few statements every few milliseconds, and
# building each expression again costs more CPU than running it.
_DUE = outbox.due(WebhookDelivery, bindparam("now", type_=UTCDateTime()))
_CANDIDATES = (
    select(WebhookDelivery.id, WebhookDelivery.partner_id)
    .where(_DUE)
    .order_by(WebhookDelivery.next_attempt_at)
    .limit(bindparam("window"))
)
_RANKED = (
    select(
        WebhookDelivery.id,
        WebhookDelivery.partner_id,
        WebhookDelivery.next_attempt_at,
        func.row_number()
        .over(
            partition_by=WebhookDelivery.partner_id,
            order_by=(WebhookDelivery.next_attempt_at, WebhookDelivery.id),
        )
        .label("rank"),
    )
    .where(_DUE)
    .subquery()
)
_RANKED_CANDIDATES = (
    select(_RANKED.c.id, _RANKED.c.partner_id)
    .where(_RANKED.c.rank <= bindparam("per_partner"))
    .order_by(_RANKED.c.next_attempt_at, _RANKED.c.id)
    .limit(bindparam("window"))
)
_SENDABLE = (
    select(WebhookDelivery.id)
    .where(WebhookDelivery.id.in_(bindparam("picked", expanding=True)), _DUE)
    # partner disable/enable (kuitti.partners.cli): a disabled partner's deliveries wait.
    .where(exists().where(Partner.id == WebhookDelivery.partner_id, Partner.disabled_at.is_(None)))
)


def _partner_column(column: InstrumentedAttribute[T]) -> ScalarSelect[T]:
    """One column of the delivery's partner, for the leasing statement's ``RETURNING``."""
    return (
        select(column)
        .where(Partner.id == WebhookDelivery.partner_id)
        .correlate(WebhookDelivery)
        .scalar_subquery()
    )


@lru_cache(maxsize=2)
def _leasing(dialect: str) -> Update:
    """The leasing ``UPDATE``, returning each row with its partner's URL and key as they are now
    (read at every attempt: a rotated key or a new URL applies to the next one) in the same
    statement."""
    return outbox.take(WebhookDelivery, _SENDABLE, dialect).returning(
        WebhookDelivery.id,
        WebhookDelivery.partner_id,
        WebhookDelivery.notification_type,
        WebhookDelivery.payload,
        WebhookDelivery.bare_authorization,
        WebhookDelivery.attempt_count,
        WebhookDelivery.created_at,
        WebhookDelivery.next_attempt_at,
        _partner_column(Partner.webhook_url).label("webhook_url"),
        _partner_column(Partner.webhook_key_sealed).label("webhook_key_sealed"),
    )


def claim_due(
    services: Services,
    *,
    limit: int = CLAIM_BATCH,
    busy: dict[uuid.UUID, int] | None = None,
    per_partner: int = MAX_IN_FLIGHT_PER_PARTNER,
) -> list[Claim]:
    """Lease up to ``limit`` due deliveries, at most ``per_partner`` minus ``busy[partner]`` for
    each partner. Returns them in due order."""
    return _claim_due(services, limit=limit, busy=busy or {}, per_partner=per_partner)[0]


def _claim_due(
    services: Services,
    *,
    limit: int,
    busy: dict[uuid.UUID, int],
    per_partner: int,
    finished: Sequence[Outcome] = (),
    rng: random.Random | None = None,
) -> tuple[list[Claim], bool]:
    """``claim_due``, and whether more were due than it took (a backlog: claim again as soon as
    there is room, rather than waiting for a wake-up).

    With ``finished`` outcomes, records them (``record_outcomes``) in the same transaction as
    the claim: one commit per batch instead of two. They are recorded even when nothing is due,
    and if the transaction fails neither the outcomes nor the lease are written."""
    now = services.clock.now()
    if not finished:
        if limit <= 0:
            return [], True
        # A cheap read first: an idle poll never takes the (SQLite: database-wide) write lock.
        with services.db.session(write=False) as session:
            candidates = _candidates(session.connection(), now, limit, busy, per_partner)
        picked, more = _pick(candidates, limit, busy, per_partner)
        if not picked:
            return [], more
        with services.db.session() as session:
            return _lease(services, session.connection(), picked, now), more
    rows = _outcome_rows(services.settings, finished, rng or random.Random())
    more = limit <= 0
    claims: list[Claim] = []
    with services.db.session() as session:
        _write_outcomes(session, rows)
        connection = session.connection()
        if limit > 0:
            candidates = _candidates(connection, now, limit, busy, per_partner)
            picked, more = _pick(candidates, limit, busy, per_partner)
            if picked:
                claims = _lease(services, connection, picked, now)
    _count_outcomes(rows)
    return claims, more


def _candidates(
    connection: Connection,
    now: datetime,
    limit: int,
    busy: dict[uuid.UUID, int],
    per_partner: int,
) -> list[tuple[uuid.UUID, uuid.UUID]]:
    """Due deliveries' ids and partners, in due order: enough for ``_pick`` to fill ``limit``
    within the per-partner limits."""
    window = max(limit * 8, 256)
    candidates = [
        (row[0], row[1]) for row in connection.execute(_CANDIDATES, {"now": now, "window": window})
    ]
    if len(candidates) == window and _room_used(candidates, busy, per_partner) < limit:
        # One partner's backlog fills the window: rank per partner instead, so the others
        # are not crowded out (costlier, so only when needed).
        params = {"now": now, "per_partner": per_partner, "window": limit + sum(busy.values())}
        candidates = [(row[0], row[1]) for row in connection.execute(_RANKED_CANDIDATES, params)]
    return candidates


def _pick(
    candidates: Sequence[tuple[uuid.UUID, uuid.UUID]],
    limit: int,
    busy: dict[uuid.UUID, int],
    per_partner: int,
) -> tuple[list[uuid.UUID], bool]:
    """The ids to lease, within ``limit`` and the per-partner limits, and whether any due
    candidate was left over."""
    room = Counter({pid: per_partner - n for pid, n in busy.items()})
    picked: list[uuid.UUID] = []
    for delivery_id, partner_id in candidates:
        if partner_id not in room:
            room[partner_id] = per_partner
        if room[partner_id] > 0 and len(picked) < limit:
            room[partner_id] -= 1
            picked.append(delivery_id)
    return picked, len(candidates) > len(picked)


def _lease(
    services: Services, connection: Connection, picked: list[uuid.UUID], now: datetime
) -> list[Claim]:
    """Lease the ``picked`` rows that are still due (another worker may have taken some) and
    return them as claims, in due order, with their partner's current URL and key."""
    lease = Lease.new(now, lease_seconds(services.settings))
    params = {"picked": picked, "now": now, **lease.values}
    leased = sorted(
        connection.execute(_leasing(services.db.dialect), params),
        key=lambda row: row.next_attempt_at,
    )
    secret = services.settings.resolved_secret_key
    claims: list[Claim] = []
    for row in leased:
        key: str | None = None
        if row.webhook_key_sealed:
            with contextlib.suppress(ValueError):
                key = _open_key(secret, row.webhook_key_sealed)
        claims.append(
            Claim(
                delivery_id=row.id,
                partner_id=row.partner_id,
                notification_type=row.notification_type,
                url=row.webhook_url,
                webhook_key=key,
                bare_authorization=row.bare_authorization,
                body=row.payload.encode(),
                attempt_count=row.attempt_count,
                created_at=row.created_at,
                lease_token=lease.token,
                key_sealed_elsewhere=bool(row.webhook_key_sealed) and key is None,
            )
        )
    return claims


class HttpClients:
    """The worker's HTTP client: one ``aiohttp`` session whose pool keeps a few keep-alive
    connections per target (address, port and TLS name), at most ``MAX_IN_FLIGHT_PER_PARTNER``.

    aiohttp rather than httpx: measured with ``bench/webhooks.py``, httpx spent about two thirds
    of the worker's CPU per delivery (request and response models, header validation, the pool's
    connection checks); aiohttp's client costs a fraction of that for the same small POSTs.
    Redirects are never followed (a 3xx is a failed attempt); proxies from the environment are
    ignored (the SSRF guard checks the real target)."""

    def __init__(self, settings: Settings) -> None:
        self._timeout = aiohttp.ClientTimeout(total=settings.webhook_timeout_seconds)
        # One TLS context for all (loading the CA bundle takes ~50 ms each time).
        self._tls = ssl.create_default_context(cafile=certifi.where())
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        """Made on first use, inside the running event loop."""
        if self._session is None:
            connector = aiohttp.TCPConnector(
                limit=0,  # the pipeline bounds the calls in flight
                limit_per_host=MAX_IN_FLIGHT_PER_PARTNER,
                keepalive_timeout=30,
                ssl=self._tls,
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=self._timeout,
                trust_env=False,
                auto_decompress=False,
                cookie_jar=aiohttp.DummyCookieJar(),
            )
        return self._session

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def __aenter__(self) -> HttpClients:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.aclose()


def make_client(settings: Settings) -> HttpClients:
    return HttpClients(settings)


async def send(
    services: Services,
    client: HttpClients,
    claim: Claim,
    guard: TargetGuard,
    *,
    wall_time: WallTime = time.time,
) -> Outcome:
    """One attempt. Never raises for anything the partner's side can cause.

    ``webhook-timestamp`` is the sending moment on the real clock (``wall_time``), because
    partners compare it with their own clocks to reject replays; due times follow
    ``services.clock``."""
    timeout = services.settings.webhook_timeout_seconds
    at = services.clock.now()
    started = time.perf_counter()
    status_code: int | None = None
    error: str | None = None
    try:
        # The timeout bounds the whole attempt, name resolution included.
        async with asyncio.timeout(timeout):
            if claim.key_sealed_elsewhere:
                raise TargetRefused(
                    "the partner's webhook key was sealed with another server secret: run with "
                    "the KUITTI_SECRET_KEY it was created with, or give the partner a new key "
                    "('kuitti partner rotate PARTNER_ID --secret webhook_key')"
                )
            if not claim.url or not claim.webhook_key:
                raise TargetRefused("the partner has no webhook URL or key any more")
            target = await guard.target(claim.url)
            headers = webhook_headers(
                claim.webhook_key,
                claim.webhook_id,
                int(wall_time()),
                claim.body,
                bare_authorization=claim.bare_authorization,
            )
            if target.host_header is not None:
                headers["Host"] = target.host_header
            async with client.session.post(
                target.url,
                data=claim.body,
                headers=headers,
                allow_redirects=False,
                server_hostname=target.sni_hostname,
            ) as response:
                status_code = response.status
                await _drain(response)
        if not 200 <= status_code < 300:
            error = f"HTTP {status_code}"
            if 300 <= status_code < 400:
                error += " (redirects are not followed; answer 2xx at the webhook URL itself)"
    except TargetRefused as exc:
        error = str(exc)
    except TimeoutError:
        error = f"timed out after {timeout:g} s"
    except aiohttp.ServerDisconnectedError:
        error = "the connection was closed without an answer"
    except aiohttp.ClientConnectorError as exc:
        error = f"could not connect: {exc.os_error}"
    except (aiohttp.ClientError, OSError, InvalidWebhookKey) as exc:
        error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    elapsed = time.perf_counter() - started
    metrics.WEBHOOK_ATTEMPT_LATENCY.observe(elapsed)
    outcome = Outcome(
        claim=claim,
        at=at,
        finished_at=services.clock.now(),
        status_code=status_code,
        latency_ms=round(elapsed * 1000),
        error=error[:ERROR_MAX_CHARS] if error else None,
    )
    log.info(
        "webhook attempt",
        delivery_id=claim.webhook_id,
        partner_id=str(claim.partner_id),
        notification_type=claim.notification_type,
        status_code=status_code,
        latency_ms=outcome.latency_ms,
        error=outcome.error,
    )
    return outcome


async def _drain(response: aiohttp.ClientResponse) -> None:
    """Read a small answer so the connection can be reused; stop reading a large one (the
    connection is then closed rather than reused)."""
    received = 0
    async for chunk in response.content.iter_any():
        received += len(chunk)
        if received > RESPONSE_BODY_LIMIT_BYTES:
            break


@dataclass(frozen=True)
class _OutcomeRows:
    """What recording a batch of outcomes writes, and what to count once it is committed."""

    attempts: list[dict[str, object]]
    updates: list[dict[str, object]]
    tally: list[tuple[str, Outcome]]


def record_outcomes(
    services: Services, outcomes: Sequence[Outcome], *, rng: random.Random | None = None
) -> None:
    """Log the attempts and move each delivery on, in one transaction."""
    if not outcomes:
        return
    rows = _outcome_rows(services.settings, outcomes, rng or random.Random())
    with services.db.session() as session:
        _write_outcomes(session, rows)
    _count_outcomes(rows)


def _outcome_rows(
    settings: Settings, outcomes: Sequence[Outcome], rng: random.Random
) -> _OutcomeRows:
    """Each attempt's row, and each delivery's next state: delivered, a retry after the
    schedule's delay (``rng``: the jitter, not a secret), or failed for good."""
    rows = _OutcomeRows([], [], [])
    for outcome in outcomes:
        claim = outcome.claim
        made = claim.attempt_count + 1
        if outcome.ok:
            status, next_at, delivered = DeliveryStatus.DELIVERED, outcome.finished_at, outcome.at
        elif outbox.gives_up(settings, made):
            status, next_at, delivered = DeliveryStatus.FAILED, outcome.finished_at, None
        else:
            delay = outbox.retry_delay_seconds(settings, made, rng)
            status = DeliveryStatus.PENDING
            next_at, delivered = outcome.finished_at + timedelta(seconds=delay), None
        rows.updates.append(
            {
                "id": claim.delivery_id,
                "lease_token": claim.lease_token,
                "status": status.value,
                "attempt_count": made,
                "next_attempt_at": next_at,
                "delivered_at": outcome.finished_at if delivered else None,
            }
        )
        rows.attempts.append(
            {
                "delivery_id": claim.delivery_id,
                "at": outcome.at,
                "status_code": outcome.status_code,
                "latency_ms": outcome.latency_ms,
                "error": outcome.error,
            }
        )
        rows.tally.append((status.value, outcome))
    return rows


def _write_outcomes(session: Session, rows: _OutcomeRows) -> None:
    """The attempts' rows, and each delivery moved on while its lease still holds (a lease
    that ran out meanwhile belongs to whoever took the row since: nothing is written to it).
    On the driver, as arrays on PostgreSQL: psycopg's ``executemany`` runs row by row through its
    Python layer, which would be a fifth of the worker's CPU."""
    db = database_of(session)
    db.insert_rows(session, {WebhookAttempt: rows.attempts})
    db.update_rows(
        session,
        WebhookDelivery,
        rows.updates,
        match=("id", "lease_token"),
        cleared=outbox.LEASE_COLUMNS,
    )


def _count_outcomes(rows: _OutcomeRows) -> None:
    """Metrics and the give-up log line, once the outcomes are committed."""
    for status_value, outcome in rows.tally:
        kind = outcome.claim.notification_type
        if status_value == DeliveryStatus.DELIVERED:
            metrics.WEBHOOKS_SENT.labels(kind).inc()
            lag = (outcome.finished_at - outcome.claim.created_at).total_seconds()
            metrics.WEBHOOK_LAG.observe(max(lag, 0.0))
        elif status_value == DeliveryStatus.FAILED:
            metrics.WEBHOOKS_FAILED.labels(kind).inc()
            log.warning(
                "webhook failed for good",
                delivery_id=outcome.claim.webhook_id,
                partner_id=str(outcome.claim.partner_id),
                error=outcome.error,
            )
        else:
            metrics.WEBHOOKS_RETRIED.labels(kind).inc()


async def deliver_due(
    services: Services,
    client: HttpClients,
    *,
    guard: TargetGuard | None = None,
    wall_time: WallTime = time.time,
) -> int:
    """Send everything that is due now, wait for every answer, record the outcomes; repeat until
    nothing is due. Returns the number of attempts made. (The step that tests drive.)"""
    guard = guard or TargetGuard(allow_insecure=services.settings.webhook_allow_insecure)
    made = 0
    while True:
        claims = await asyncio.to_thread(claim_due, services)
        if not claims:
            return made
        outcomes = await asyncio.gather(
            *(send(services, client, c, guard, wall_time=wall_time) for c in claims)
        )
        await asyncio.to_thread(record_outcomes, services, outcomes)
        made += len(outcomes)


class Pipeline:
    """Keeps up to ``MAX_IN_FLIGHT`` sends going, records their outcomes in batches."""

    def __init__(
        self,
        services: Services,
        client: HttpClients,
        *,
        wall_time: WallTime = time.time,
        max_in_flight: int = MAX_IN_FLIGHT,
        per_partner: int = MAX_IN_FLIGHT_PER_PARTNER,
    ) -> None:
        self.services = services
        self.client = client
        self.wall_time = wall_time
        self.max_in_flight = max_in_flight
        self.per_partner = per_partner
        self.claim_threshold = max(1, max_in_flight // 4)
        self.guard = TargetGuard(allow_insecure=services.settings.webhook_allow_insecure)
        self.busy: dict[uuid.UUID, int] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.outcomes: list[Outcome] = []
        self.rng = random.Random()  # retry jitter, not a secret
        self.progress = asyncio.Event()
        self.backlog = True  # until a claim says otherwise, something may be due
        self.full = False  # the last claim took as many as it asked for: ask again at once

    @property
    def in_flight(self) -> int:
        return len(self.tasks)

    async def step(self, *, woken: bool = False) -> int:
        """Record the finished outcomes and lease due rows into free slots, in one transaction
        (one thread hop, one commit). It claims only when there may be something due: after a
        wake-up (a commit that queued a webhook, or the poll) or while the last claim left a
        backlog. On a database error the outcomes are kept for the next try. Returns the number
        of calls started."""
        self.backlog = self.backlog or woken
        self.full = False
        room = self.max_in_flight - self.in_flight
        # Claim in batches: a claim per freed slot would cost a transaction per delivery.
        claiming = (
            self.backlog and room > 0 and (not self.in_flight or room >= self.claim_threshold)
        )
        limit = min(room, CLAIM_BATCH) if claiming else 0
        finished, self.outcomes = self.outcomes, []
        if not limit and not finished:
            return 0
        try:
            claims, more = await asyncio.to_thread(
                _claim_due,
                self.services,
                limit=limit,
                busy=dict(self.busy),
                per_partner=self.per_partner,
                finished=finished,
                rng=self.rng,
            )
        except BaseException:
            self.outcomes[:0] = finished
            raise
        if limit:
            self.backlog = more
            self.full = len(claims) == limit
        for claim in claims:
            self.busy[claim.partner_id] = self.busy.get(claim.partner_id, 0) + 1
            task = asyncio.create_task(self._send(claim))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        return len(claims)

    async def _send(self, claim: Claim) -> None:
        try:
            outcome = await send(
                self.services, self.client, claim, self.guard, wall_time=self.wall_time
            )
            self.outcomes.append(outcome)
        finally:
            left = self.busy.get(claim.partner_id, 1) - 1
            if left > 0:
                self.busy[claim.partner_id] = left
            else:
                self.busy.pop(claim.partner_id, None)
            self.progress.set()

    async def drain(self, timeout_seconds: float) -> None:
        """On shutdown: let calls under way finish (bounded), then record what finished."""
        if self.tasks:
            _done, pending = await asyncio.wait(self.tasks, timeout=timeout_seconds)
            for task in pending:
                task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.to_thread(record_outcomes, self.services, self.outcomes, rng=self.rng)


async def _wait_any(events: Iterable[asyncio.Event], timeout_seconds: float) -> None:
    waiters = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, timeout=timeout_seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


async def run_webhooks(
    services: Services,
    stop: asyncio.Event,
    wake: asyncio.Event,
    *,
    wall_time: WallTime = time.time,
    poll_seconds: float = POLL_SECONDS,
    batch_window_seconds: float = BATCH_WINDOW_SECONDS,
) -> None:
    """Send webhooks until ``stop`` is set: look for due rows when ``wake`` is set (a commit
    that queued one), while a backlog lasts, or every ``poll_seconds`` (retries falling due,
    events queued by another process without PostgreSQL's NOTIFY); record outcomes as calls
    finish.

    Without a backlog, a wake-up or a finished call first waits ``batch_window_seconds``, so one
    claim and one outcome transaction serve every event and answer of that window rather than
    one each: far less CPU per delivery when events trickle in, for a few milliseconds of lag."""
    backoff = 0.0
    async with make_client(services.settings) as client:
        pipeline = Pipeline(services, client, wall_time=wall_time)
        polled = False  # the poll timer ran out: look for due rows
        try:
            while not stop.is_set():
                woken = polled or wake.is_set()
                wake.clear()
                pipeline.progress.clear()
                try:
                    await pipeline.step(woken=woken)
                except Exception as exc:  # the database is away: keep running, try again
                    metrics.WEBHOOK_WORKER_ERRORS.inc()
                    backoff = min(max(backoff * 2, 0.1), DB_RETRY_MAX_SECONDS)
                    log.warning(
                        "webhook worker cannot reach the database",
                        error=f"{type(exc).__name__}: {exc}"[:300],
                        retry_in_seconds=backoff,
                    )
                    polled = True  # look again after the pause
                    await _wait_any([stop], backoff)
                    continue
                backoff = 0.0
                if pipeline.full and pipeline.backlog:
                    continue  # more are due right now
                await _wait_any([stop, wake, pipeline.progress], poll_seconds)
                polled = not (wake.is_set() or pipeline.progress.is_set())
                if not polled and not pipeline.backlog and batch_window_seconds > 0:
                    await _wait_any([stop], batch_window_seconds)
        finally:
            await pipeline.drain(services.settings.webhook_timeout_seconds)
