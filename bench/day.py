"""A simulated day of national traffic: a day of card payments compressed into ``--minutes``,
replayed against kuitti served as in production, with posts, reads, card-linking and webhooks
together; prints p50/p99 and errors per endpoint, webhook lag, matching delay, replica lag
(``--replica``) and the database's growth per hour.

kuitti runs as ``kuitti serve --workers 2 --no-worker`` and one ``kuitti worker`` (the README's
"Running on PostgreSQL with several processes"; ``bench/failover.py``'s ``Kuitti``), on a fresh
PostgreSQL database (or SQLite, ``--database sqlite``; or, with ``--replica``, a primary of the
bench's own with an asynchronous streaming standby that answers kuitti's reads,
``tests/pgcluster.py`` as in ``bench/replica.py``). Webhooks go to real HTTP receivers on
loopback (``bench/webhooks.py``'s receivers process), which note when each arrived.

**The day.** Each hour of ``HOURLY_WEIGHTS`` becomes ``--minutes`` × 60 / 24 seconds (25 s by
default) at a constant rate: ``--peak`` receipt posts a second times the hour's weight. The load
is open loop: request *i* of a slice is due at its time whatever the server does, and its latency
runs from that due time (a server that falls behind is charged for the queue); at most
``--connections`` requests are in flight, the rest wait for a connection, still on the clock,
and one due while four times as many wait is counted as offered and not sent (``NOT_SENT``).
Per receipt post (``POST_MIX``): the card-linking form alone, a ``RECEIPT_ID`` token, an
``EMAIL`` token (a verified user's address: delivered, and an e-mail written), a ``CARD`` token
(an enrolled card's), or the card-linking form with an ``Idempotency-Key``. Who paid
(``PAYERS``): an enrolled card linked to a user, whose issuer reports the auth within 2 s either
side of the receipt (``POST /api/v1/card-transactions/``, so card-linking matches it at once on
its code), a pilot bank's card (matched on its masked PAN alone, ``full_receipt_notification``),
or a card nobody enrolled (the payment waits, as most do). Receipts have 1–60 product rows
(``ROWS``, median 4), ``bench/ingest.py``'s realistic rows. Apps read with their users' tokens
(``READS_PER_POST``): ``service_json`` and ``service_pdf`` of one of the latest receipts
delivered to the user by a token, and the user's list.

**Webhook lag** is from the delivery's row time (written in the transaction that commits it) to
its arrival at the receiver, both this machine's clock. **Matching delay** is from the moment both
the receipt and its card transaction were acknowledged (the later of the two answers) to the
issuer's ``receipt_notification`` arriving, and to the match's row time (``matched_at``); for a
pilot card, from the receipt's answer to the bank's ``full_receipt_notification``. **Growth**:
the database's bytes (``pg_database_size``; the SQLite files) and rows inserted in all tables
(``pg_stat_user_tables``; SQLite: receipts only) at each compressed hour's end, and per receipt,
extrapolated to Finland's 6.7 million card payments a day spread over ``HOURLY_WEIGHTS``.

    .venv/bin/python bench/day.py                             # 10 minutes, peak 1,000 posts/s
    .venv/bin/python bench/day.py --minutes 2 --peak 50       # a short look
    .venv/bin/python bench/day.py --replica                   # reads from a streaming standby
    .venv/bin/python bench/day.py --database sqlite --minutes 1 --peak 20

Everything shares the machine's cores: kuitti, PostgreSQL, the receivers and this load generator
(Python, uvloop and aiohttp). So the report gives the rate offered and served each hour, the CPU
each part used, and the load average, and says which hours the machine could not hold.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import heapq
import os
import random
import re
import secrets
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import psycopg
import uvloop

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from failover import SECRET, Kuitti  # noqa: E402  (bench/ is the script's own directory)
from ingest import (  # noqa: E402
    CLOCK_TICKS,
    database,
    process_tree,
    realistic_receipt,
    tree_cpu_seconds,
)
from webhooks import _readline, start_receivers, stop_receivers  # noqa: E402

from kuitti.cards.service import check_card_request, enroll_card  # noqa: E402
from kuitti.clock import SystemClock  # noqa: E402
from kuitti.db import Database  # noqa: E402
from kuitti.models import Partner, PartnerRole, User  # noqa: E402
from kuitti.oauth.tokens import issue_access_token  # noqa: E402
from kuitti.services import Services  # noqa: E402
from kuitti.users.service import hash_password  # noqa: E402
from tests.conftest import make_settings  # noqa: E402
from tests.factories import add_connection, make_partner  # noqa: E402
from tests.pgcluster import pg_cluster, pg_standby  # noqa: E402

HOURLY_WEIGHTS = (
    0.05, 0.03, 0.02, 0.015, 0.015, 0.03, 0.08, 0.20, 0.35, 0.50, 0.68, 0.88,
    0.97, 0.90, 0.85, 0.90, 1.00, 0.98, 0.82, 0.62, 0.45, 0.30, 0.18, 0.10,
)  # fmt: skip
"""Card payments in each hour of a day (00–01, 01–02, …, local time) as a share of the busiest
hour: almost none at night, a noon peak and a slightly higher one in the late afternoon, an
evening tail. The shape of Finnish card payments as published hourly profiles show it, rounded; a
model, not a measurement. Its mean is 0.46 of its peak: at ``--peak 1000`` the simulated day
holds about 39 million receipts, six Finnish days (6.7 million a day, 78 a second on average),
so 1,000 a second stands for the busiest hour of the busiest days."""

POST_MIX = (
    ("card", 0.60),
    ("RECEIPT_ID", 0.12),
    ("EMAIL", 0.03),
    ("CARD", 0.10),
    ("Idempotency-Key", 0.15),
)
"""What share of receipt posts takes each form (the card-linking form alone, a ``RECEIPT_ID``
token, an ``EMAIL`` token, a ``CARD`` token, the card-linking form with an ``Idempotency-Key``)."""

PAYERS = (("enrolled", 0.30), ("pilot", 0.03), ("unknown", 0.67))
"""Who paid a receipt's card payment (a ``CARD`` token's receipt: always its enrolled card)."""

READS_PER_POST = (("service_json", 0.30), ("service_pdf", 0.005), ("list", 0.05))
"""Reads by apps with their users' tokens, per receipt post."""

ROWS = (1, 1, 2, 2, 3, 4, 4, 5, 7, 10, 15, 25, 40, 60)
"""Product rows of a receipt, one drawn at random (median 4)."""

FINLAND_RECEIPTS_A_DAY = 6_700_000
TRANSACTION_SKEW_SECONDS = 2.0
ENROLLED_BINS = ("415301", "552211")
PILOT_BIN = "601100"
UNKNOWN_BIN = "490012"  # no card of this BIN is enrolled
LOCAL = timezone(timedelta(hours=2))
TEMPLATES = 120
DRAIN_SECONDS = 180.0
CODE_LETTERS = "ABCDEFGHJKLMNPQRSTUVWXYZ0123456789"
BACKLOG_PER_CONNECTION = 4
NOT_SENT = -2
"""A request due while ``BACKLOG_PER_CONNECTION`` × ``--connections`` requests already wait in
this generator is counted as offered and not sent: the server is minutes behind, and queueing
more would only stall the generator itself (unbounded, it fell a minute behind its own plan and
grew to 3 GB at ``--peak 1000`` on a loaded machine)."""


# -- the world: partners, users, cards -----------------------------------------------------------


@dataclass
class World:
    merchants: list[tuple[str, str]]  # (API key, namespace)
    app_key: str
    issuer_key: str
    users: list[tuple[str, dict[str, str]]]  # (e-mail, the app's headers for the user)
    cards: list[int]  # enrolled card i belongs to user cards[i]
    pilot_cards: int


def build_world(services: Services, ports: list[int], args: argparse.Namespace) -> World:
    """Three merchants with namespaces, an app, a card issuer and a pilot bank (webhooks to the
    receivers), ``--users`` verified users connected to the app with a real access token, and
    ``--cards`` enrolled cards linked to them (``card_added`` to the issuer) and ``--pilot-cards``
    pilot cards. Users are written as rows with one password hash: hashing one a user would only
    measure argon2."""
    hook = "http://127.0.0.1:{}/hooks/kuitti".format
    merchants = [
        make_partner(services, PartnerRole.MERCHANT, name=f"Kauppa {i}", namespaces=[f"day{i}"])
        for i in range(3)
    ]
    app = make_partner(services, PartnerRole.APP, name="Kuittikansio", webhook_url=hook(ports[0]))
    issuer = make_partner(
        services, PartnerRole.CARD_ISSUER, name="Pankki", webhook_url=hook(ports[1])
    )
    pilot = make_partner(
        services, PartnerRole.BANK_PILOT, name="Pilot Bank", webhook_url=hook(ports[2])
    )
    now = services.clock.now()
    password = hash_password("correct horse battery staple")
    users: list[tuple[str, dict[str, str]]] = []
    user_ids: list[uuid.UUID] = []
    with services.db.session() as session:
        app_row = session.get(Partner, app.partner.id)
        assert app_row is not None
        for i in range(args.users):
            email = f"user{i}@example.com"
            user = User(
                id=uuid.uuid4(), email=email, password_hash=password, email_verified_at=now,
                created_at=now,
            )  # fmt: skip
            session.add(user)
            session.flush()
            connection = add_connection(session, user.id, app_row.id, now=now)
            session.flush()
            token = issue_access_token(
                session, services.settings, connection, app_row, code_hash=None, now=now
            )
            headers = {"SERVICE_APIKEY": app.api_key, "Authorization": f"Bearer {token}"}
            users.append((email, headers))
            user_ids.append(user.id)
    cards = [i % args.users for i in range(args.cards)]
    with services.db.session() as session:
        for i, holder in enumerate(cards):
            request = check_card_request(f"card-{i}", enrolled_pan(i), "2030-12", None)
            enroll_card(session, issuer.partner, request, now=now, user_id=user_ids[holder])
        for i in range(args.pilot_cards):
            request = check_card_request(f"pilot-{i}", f"{PILOT_BIN}******{i:04d}", "2030-12", None)
            enroll_card(session, pilot.partner, request, now=now, pilot=True)
    return World(
        [(m.api_key, f"day{i}") for i, m in enumerate(merchants)],
        app.api_key,
        issuer.api_key,
        users,
        cards,
        args.pilot_cards,
    )


def enrolled_pan(index: int) -> str:
    return f"{ENROLLED_BINS[index % 2]}******{index // 2 % 10_000:04d}"


# -- bodies --------------------------------------------------------------------------------------


class Template:
    """A receipt post's JSON with ``@@NAME@@`` holes, filled by joining its parts (the load
    generator builds hundreds of bodies a second on the cores it shares with the server)."""

    def __init__(self, body: Any, amount: int) -> None:
        self.parts = re.split(r"@@([A-Z]+)@@", orjson.dumps(body).decode())
        self.amount = amount

    def fill(self, values: dict[str, str]) -> bytes:
        texts, names = self.parts[0::2], self.parts[1::2]
        filled = [texts[0]]
        for name, text in zip(names, texts[1:], strict=True):
            filled += (values[name], text)
        return "".join(filled).encode()


TOKENS: dict[str, dict[str, str] | None] = {
    "card": None,
    "Idempotency-Key": None,
    "RECEIPT_ID": {"type": "RECEIPT_ID", "namespace": "@@NAMESPACE@@", "value": "@@TOKEN@@"},
    "EMAIL": {"type": "EMAIL", "value": "@@TOKEN@@"},
    "CARD": {"type": "CARD", "id": "@@TOKEN@@", "value": "@@PAN@@"},
}


def templates(rng: random.Random) -> dict[str, list[Template]]:
    """``TEMPLATES`` receipts, each in every form of ``POST_MIX``."""
    made: dict[str, list[Template]] = {kind: [] for kind in TOKENS}
    for number in range(TEMPLATES):
        doc = realistic_receipt(rng, number, rng.choice(ROWS))
        doc["receiptNumber"] = "@@NUMBER@@"
        doc["receiptTimeStamp"] = "@@TIME@@"
        attributes = doc["payments"][0]["attributes"]
        attributes.update(
            timeStamp="@@TIME@@", maskedPAN="@@PAN@@", MID="@@MID@@",
            authorizationCode="@@CODE@@", referenceNumber="@@REFERENCE@@",
        )  # fmt: skip
        for kind, token in TOKENS.items():
            body = doc if token is None else {"attributes": {"tokens": [token]}, "receipt": doc}
            made[kind].append(Template(body, doc["totalPriceIncVAT"]))
    return made


# -- the plan: what is due when ------------------------------------------------------------------


def pick(rng: random.Random, shares: tuple[tuple[str, float], ...]) -> str:
    roll, total = rng.random(), 0.0
    for name, share in shares:
        total += share
        if roll < total:
            return name
    return shares[-1][0]


@dataclass(slots=True)
class Purchase:
    """One receipt post, and what became of it."""

    kind: str
    payer: str
    card: int  # the enrolled or pilot card's index; -1 for a card nobody enrolled
    template: Template
    merchant: int
    user: int  # an EMAIL token's user
    mid: str
    code: str
    reference: str
    receipt_id: str | None = None
    answered: float = 0.0  # wall clock
    transaction_answered: float = 0.0


@dataclass(order=True)
class Due:
    at: float  # seconds from the start
    sequence: int
    what: str = field(compare=False)  # "post", "transaction" or a read
    hour: int = field(compare=False)
    purchase: Purchase | None = field(compare=False, default=None)


class Plan:
    """The day's requests, made an hour at a time as the run reaches it."""

    def __init__(self, args: argparse.Namespace, world: World, hour_seconds: float) -> None:
        self.rng = random.Random(args.seed)
        self.world, self.peak, self.hour_seconds = world, float(args.peak), hour_seconds
        self.templates = templates(self.rng)
        self.sequence = 0
        self.heap: list[Due] = []
        self.next_hour = 0
        self.purchases: list[Purchase] = []

    def rate(self, hour: int) -> float:
        return self.peak * HOURLY_WEIGHTS[hour] / max(HOURLY_WEIGHTS)

    def pop(self) -> Due | None:
        """The next request due, making the next hour's when this one's end is near."""
        while self.next_hour < 24 and (
            not self.heap or self.heap[0].at > (self.next_hour * self.hour_seconds) - 5
        ):
            self._make(self.next_hour)
            self.next_hour += 1
        return heapq.heappop(self.heap) if self.heap else None

    def _push(self, at: float, what: str, hour: int, purchase: Purchase | None = None) -> None:
        self.sequence += 1
        heapq.heappush(self.heap, Due(max(at, 0.0), self.sequence, what, hour, purchase))

    def _make(self, hour: int) -> None:
        start, rate = hour * self.hour_seconds, self.rate(hour)
        posts = round(rate * self.hour_seconds)
        for i in range(posts):
            at = start + (i + 0.5) / rate
            purchase = self._purchase()
            self.purchases.append(purchase)
            self._push(at, "post", hour, purchase)
            if purchase.payer == "enrolled":
                skew = self.rng.uniform(-TRANSACTION_SKEW_SECONDS, TRANSACTION_SKEW_SECONDS)
                self._push(at + skew, "transaction", hour, purchase)
        for read, share in READS_PER_POST:
            reads = round(rate * share * self.hour_seconds)
            for i in range(reads):
                self._push(start + (i + self.rng.random()) / (rate * share), read, hour)

    def _purchase(self) -> Purchase:
        rng, world = self.rng, self.world
        kind = pick(rng, POST_MIX)
        payer = "enrolled" if kind == "CARD" else pick(rng, PAYERS)
        card = {
            "enrolled": rng.randrange(len(world.cards)),
            "pilot": rng.randrange(max(world.pilot_cards, 1)),
        }.get(payer, -1)
        if payer == "pilot" and not world.pilot_cards:
            payer, card = "unknown", -1
        return Purchase(
            kind, payer, card, rng.choice(self.templates[kind]), rng.randrange(3),
            rng.randrange(len(world.users)), f"MID-{rng.randint(1, 500):04d}",
            "".join(rng.choices(CODE_LETTERS, k=6)), f"{rng.randrange(10**12):012d}",
        )  # fmt: skip


# -- the load generator --------------------------------------------------------------------------


@dataclass
class Tally:
    """Answers of one endpoint (or one hour): latencies of the 2xx answers, and every status
    (0: no answer within 60 s; -1: the connection failed; ``NOT_SENT``)."""

    offered: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)

    def record(self, status: int, latency_ms: float) -> None:
        self.statuses[status] += 1
        if 200 <= status < 300:
            self.latencies_ms.append(latency_ms)

    @property
    def served(self) -> int:
        return len(self.latencies_ms)

    def percentile(self, share: float) -> float:
        return percentile(self.latencies_ms, share)

    def failures(self) -> str:
        bad = {s: n for s, n in sorted(self.statuses.items()) if not 200 <= s < 300}
        names = {0: "no answer in 60 s", -1: "connection failed", NOT_SENT: "not sent"}
        return ", ".join(f"{n} × {names.get(s, s)}" for s, n in bad.items()) or "none"


def percentile(values: list[float], share: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, int(share * len(ordered)))])


ENDPOINTS = {
    "post": "POST /api/v1/receipts/ ({})",
    "transaction": "POST /api/v1/card-transactions/",
    "service_json": "GET …/service_json/ (user token)",
    "service_pdf": "GET …/service_pdf/ (user token)",
    "list": "GET /api/v1/receipts/ (user token)",
}


class Load:
    """Sends the plan's requests when they are due and tallies the answers."""

    def __init__(self, plan: Plan, world: World, base: str, connections: int) -> None:
        self.plan, self.world, self.base, self.connections = plan, world, base, connections
        self.run_id = secrets.token_hex(4)
        self.endpoints: dict[str, Tally] = {}
        self.hours = [Tally() for _ in range(24)]
        self.readable: deque[tuple[str, int]] = deque(maxlen=5000)  # (receipt id, user)
        self.start = 0.0
        self.wall_start = 0.0
        self.rng = random.Random(plan.rng.random())
        self.http: aiohttp.ClientSession
        self.late_ms: list[float] = []  # how late this process itself sent each request

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        connector = aiohttp.TCPConnector(limit=self.connections)
        timeout = aiohttp.ClientTimeout(total=60)
        tasks: set[asyncio.Task[None]] = set()
        async with aiohttp.ClientSession(self.base, connector=connector, timeout=timeout) as http:
            self.http = http
            self.start, self.wall_start = loop.time() + 0.5, time.time() + 0.5
            while (due := self.plan.pop()) is not None:
                delay = self.start + due.at - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                if len(tasks) >= BACKLOG_PER_CONNECTION * self.connections:
                    self._tally(due, NOT_SENT, 0.0)  # the server is that far behind: give up
                    continue
                task = asyncio.create_task(self._send(due))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            if tasks:
                await asyncio.wait(tasks)

    async def _send(self, due: Due) -> None:
        if due.what == "post":
            await self._post(due)
        elif due.what == "transaction":
            await self._transaction(due)
        else:
            await self._read(due)

    def _tally(self, due: Due, status: int, latency_ms: float) -> None:
        if due.what == "post":
            assert due.purchase is not None
            endpoint = ENDPOINTS["post"].format(due.purchase.kind)
        else:
            endpoint = ENDPOINTS[due.what]
        for tally in (self.endpoints.setdefault(endpoint, Tally()), self.hours[due.hour]):
            tally.offered += 1
            tally.record(status, latency_ms)

    async def _request(
        self, due: Due, method: str, path: str, headers: dict[str, str], body: bytes | None = None
    ) -> tuple[int, bytes]:
        self.late_ms.append((asyncio.get_running_loop().time() - self.start - due.at) * 1000)
        try:
            async with self.http.request(method, path, data=body, headers=headers) as answer:
                status, content = answer.status, await answer.read()
        except TimeoutError:
            status, content = 0, b""
        except aiohttp.ClientError:
            status, content = -1, b""
        self._tally(due, status, (asyncio.get_running_loop().time() - self.start - due.at) * 1000)
        return status, content

    def _paid_at(self, due: Due) -> str:
        moment = datetime.fromtimestamp(self.wall_start + due.at, LOCAL)
        return moment.isoformat(timespec="seconds")

    def _pan(self, purchase: Purchase) -> str:
        if purchase.payer == "enrolled":
            return enrolled_pan(purchase.card)
        if purchase.payer == "pilot":
            return f"{PILOT_BIN}******{purchase.card:04d}"
        return f"{UNKNOWN_BIN}******{self.rng.randrange(10_000):04d}"

    def post(self, due: Due) -> tuple[bytes, dict[str, str]]:
        """A receipt post's body and headers."""
        purchase = due.purchase
        assert purchase is not None
        api_key, namespace = self.world.merchants[purchase.merchant]
        token = {
            "RECEIPT_ID": f"{self.run_id}-{due.sequence}",
            "EMAIL": self.world.users[purchase.user][0],
            "CARD": f"card-{purchase.card}",
        }.get(purchase.kind, "")
        body = purchase.template.fill(
            {
                "NUMBER": f"D-{due.sequence}", "TIME": self._paid_at(due),
                "PAN": self._pan(purchase), "MID": purchase.mid, "CODE": purchase.code,
                "REFERENCE": purchase.reference, "NAMESPACE": namespace, "TOKEN": token,
            }
        )  # fmt: skip
        headers = {"Authorization": f"Token {api_key}", "Content-Type": "application/json"}
        if purchase.kind == "Idempotency-Key":
            headers["Idempotency-Key"] = f"{self.run_id}-{due.sequence}"
        return body, headers

    async def _post(self, due: Due) -> None:
        purchase = due.purchase
        assert purchase is not None
        body, headers = self.post(due)
        status, content = await self._request(due, "POST", "/api/v1/receipts/", headers, body)
        if status != 200:
            return
        purchase.answered = time.time()
        answer = orjson.loads(content)
        purchase.receipt_id = answer["receipt_id"]
        if purchase.kind in ("EMAIL", "CARD") and answer["tokens"][0]["status"] == "delivered":
            holder = purchase.user if purchase.kind == "EMAIL" else self.world.cards[purchase.card]
            self.readable.append((answer["receipt_id"], holder))

    async def _transaction(self, due: Due) -> None:
        purchase = due.purchase
        assert purchase is not None
        body = orjson.dumps(
            {
                "partner_card_id": f"card-{purchase.card}", "transaction_type": "auth",
                "amount": purchase.template.amount, "currency": "EUR",
                "timestamp": self._paid_at(due), "merchant_id": purchase.mid,
                "merchant_name": "KAUPPA", "authorization_code": purchase.code,
                "reference_number": purchase.reference,
            }
        )  # fmt: skip
        headers = {"Authorization": self.world.issuer_key, "Content-Type": "application/json"}
        status, _ = await self._request(due, "POST", "/api/v1/card-transactions/", headers, body)
        if status == 200:
            purchase.transaction_answered = time.time()

    async def _read(self, due: Due) -> None:
        if due.what == "list":
            user = self.rng.choice(self.readable)[1] if self.readable else 0
            path = "/api/v1/receipts/?limit=50"
        elif self.readable:
            receipt_id, user = self.rng.choice(self.readable)
            path = f"/api/v1/receipts/{receipt_id}/{due.what}/"
        else:
            return  # nothing delivered to read yet
        await self._request(due, "GET", path, self.world.users[user][1])


@contextmanager
def collector_tuned() -> Iterator[None]:
    """The load generator's collector with what lives at the start frozen and a young generation
    of 50,000: with thousands of requests' objects alive, its default collections stopped the
    event loop for tens of milliseconds, charged to the server (``bench/reading.py``, which can
    switch it off for its 10 s; a day's run would then grow without bound)."""
    gc.collect()
    gc.freeze()
    thresholds = gc.get_threshold()
    gc.set_threshold(50_000, 20, 100)
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


# -- what the database and the machine did -------------------------------------------------------


class Sampler(threading.Thread):
    """At each compressed hour's end, the database's bytes and rows; every half second, the
    standby's replay lag (``--replica``)."""

    def __init__(
        self, url: str, sqlite_file: Path | None, hour_seconds: float, replica: bool
    ) -> None:
        super().__init__(daemon=True)
        self.url, self.sqlite_file, self.hour_seconds = url, sqlite_file, hour_seconds
        self.replica = replica
        self.stopped = threading.Event()
        self.start_monotonic = 0.0
        self.growth: list[tuple[int, int, int, float]] = []  # (bytes, rows, receipts, load avg)
        self.lag_seconds: list[float] = []
        self.lag_bytes: list[int] = []

    def sizes(self) -> tuple[int, int, int, float]:
        load = os.getloadavg()[0]
        if self.sqlite_file is not None:
            files = [self.sqlite_file, self.sqlite_file.with_name(self.sqlite_file.name + "-wal")]
            size = sum(f.stat().st_size for f in files if f.exists())
            with sqlite3.connect(self.sqlite_file, timeout=30) as connection:
                receipts = int(connection.execute("SELECT count(*) FROM receipts").fetchone()[0])
            return size, receipts, receipts, load
        with psycopg.connect(self.url, autocommit=True) as connection:
            row = connection.execute(
                "SELECT pg_database_size(current_database()),"
                " (SELECT sum(n_tup_ins) FROM pg_stat_user_tables),"
                " (SELECT count(*) FROM receipts)"
            ).fetchone()
        assert row is not None
        return int(row[0]), int(row[1] or 0), int(row[2]), load

    def run(self) -> None:
        self.growth.append(self.sizes())
        hour = 1
        while not self.stopped.is_set():
            next_hour = self.start_monotonic + hour * self.hour_seconds
            if self.replica:
                self._replica_lag()
            if time.monotonic() >= next_hour:
                self.growth.append(self.sizes())
                hour += 1
                if hour > 24:
                    return
            self.stopped.wait(min(0.5, max(next_hour - time.monotonic(), 0.01)))

    def _replica_lag(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as connection:
            row = connection.execute(
                "SELECT extract(epoch FROM replay_lag),"
                " pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn) FROM pg_stat_replication"
            ).fetchone()
        if row is not None:
            self.lag_seconds.append(float(row[0] or 0.0))
            self.lag_bytes.append(int(row[1] or 0))


def machine_busy_seconds() -> float:
    """CPU seconds every process on the machine has used (``/proc/stat``: all but idle and
    iowait)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / CLOCK_TICKS


@dataclass(frozen=True)
class Process:
    name: str
    parent: int
    own: float  # user + system CPU seconds
    reaped: float  # of its ended children it waited for


def processes() -> dict[int, Process]:
    """Every process on the machine, from /proc; a Python program named by its script."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
            argv = (stat.parent / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        name, _, rest = text.partition(" (")[2].rpartition(")")
        fields = rest.split()
        script = [a for a in argv[1:3] if a and a != b"-m"][:1]
        if name.startswith("python") and script:
            name = Path(script[0].decode(errors="replace")).name
        own = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
        reaped = (int(fields[13]) + int(fields[14])) / CLOCK_TICKS
        found[int(stat.parent.name)] = Process(name, int(fields[1]), own, reaped)
    return found


def postgres_seconds(snapshot: dict[int, Process]) -> float:
    """CPU every PostgreSQL cluster on the machine has used since it started, ended backends
    included (a postmaster's reaped children), which a sum over live processes would lose."""
    postmasters = {
        pid for pid, p in snapshot.items()
        if p.name == "postgres" and snapshot.get(p.parent, p).name != "postgres"
    }  # fmt: skip
    return sum(
        p.own + (p.reaped if pid in postmasters else 0.0)
        for pid, p in snapshot.items()
        if pid in postmasters or p.parent in postmasters
    )


def others(before: dict[int, Process], after: dict[int, Process], ours: set[int]) -> str:
    """The five programs besides ours and PostgreSQL that used the most CPU between the two
    snapshots (their ended children's included)."""
    used: dict[str, float] = {}
    for pid, p in after.items():
        if pid in ours or p.name == "postgres":
            continue
        earlier = before.get(pid)
        start = earlier.own + earlier.reaped if earlier and earlier.name == p.name else 0.0
        used[p.name] = used.get(p.name, 0.0) + p.own + p.reaped - start
    most = sorted(used.items(), key=lambda item: -item[1])[:5]
    return ", ".join(f"{name} {seconds:.0f} s" for name, seconds in most)


# -- after the day: webhooks and matching --------------------------------------------------------


def drain(url: str, sqlite_file: Path | None) -> tuple[int, int]:
    """Wait (at most ``DRAIN_SECONDS``) until no webhook waits to be sent and the matching queue is
    empty; the pending deliveries and queued payments left."""
    deadline = time.monotonic() + DRAIN_SECONDS
    while True:
        query = (
            "SELECT (SELECT count(*) FROM webhook_deliveries WHERE status = 'pending'),"
            " (SELECT count(*) FROM card_matching_queue)"
        )
        if sqlite_file is not None:
            with sqlite3.connect(sqlite_file, timeout=30) as connection:
                row = connection.execute(query).fetchone()
        else:
            with psycopg.connect(url, autocommit=True) as connection:
                row = connection.execute(query).fetchone()
        assert row is not None
        left = int(row[0]), int(row[1])
        if left == (0, 0) or time.monotonic() > deadline:
            return left
        time.sleep(0.5)  # polling the outbox, not timing a result


def epoch(moment: Any) -> float:
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return float(moment.timestamp())


def rows_since(url: str, sqlite_file: Path | None, query: str, since: datetime) -> list[Any]:
    if sqlite_file is not None:
        with sqlite3.connect(sqlite_file, timeout=30) as connection:
            moment = since.replace(tzinfo=None).isoformat(sep=" ")
            return connection.execute(query.replace("%s", "?"), (moment,)).fetchall()
    with psycopg.connect(url, autocommit=True) as connection:
        return connection.execute(query, (since,)).fetchall()


@dataclass
class Webhooks:
    lags: dict[str, list[float]]  # per notification type and receiver
    duplicates: int
    not_received: int
    arrived: dict[tuple[str, str], float]  # (``lags``' label, receipt id) → first arrival


def webhooks(
    url: str, sqlite_file: Path | None, received: dict[str, list[float]], since: datetime,
    roles: dict[str, str],
) -> Webhooks:  # fmt: skip
    rows = rows_since(
        url, sqlite_file,
        "SELECT id, notification_type, created_at, payload, partner_id FROM webhook_deliveries"
        " WHERE created_at >= %s",
        since,
    )  # fmt: skip
    lags: dict[str, list[float]] = {}
    arrived: dict[tuple[str, str], float] = {}
    not_received = 0
    for delivery_id, kind, created_at, payload, partner_id in rows:
        times = received.get(str(uuid.UUID(str(delivery_id))))
        if not times:
            not_received += 1
            continue
        label = f"{kind} to the {roles.get(str(uuid.UUID(str(partner_id))), 'partner')}"
        lags.setdefault(label, []).append(min(times) - epoch(created_at))
        body = orjson.loads(payload)
        receipt_id = body.get("receipt_id") or (body.get("data") or {}).get("receipt_id")
        if receipt_id:
            arrived[(label, str(receipt_id))] = min(times)
    duplicates = sum(len(times) - 1 for times in received.values())
    return Webhooks(lags, duplicates, not_received, arrived)


def matched_at(url: str, sqlite_file: Path | None, since: datetime) -> dict[str, float]:
    rows = rows_since(
        url, sqlite_file, "SELECT receipt_id, matched_at FROM card_matches WHERE matched_at >= %s",
        since,
    )  # fmt: skip
    return {str(uuid.UUID(str(receipt_id))): epoch(moment) for receipt_id, moment in rows}


# -- the report ----------------------------------------------------------------------------------


def spread(values: list[float], unit: str = "ms", scale: float = 1000.0) -> str:
    if not values:
        return "none"
    p50, p99 = (percentile(values, share) * scale for share in (0.5, 0.99))
    most = max(values) * scale
    return f"p50 {p50:,.0f} {unit}, p99 {p99:,.0f} {unit}, max {most:,.0f} {unit} ({len(values):,})"


def report_matching(purchases: list[Purchase], hooks: Webhooks, matches: dict[str, float]) -> None:
    to_match: list[float] = []
    to_issuer: list[float] = []
    to_app: list[float] = []
    to_pilot: list[float] = []
    unmatched = 0
    for purchase in purchases:
        receipt_id = purchase.receipt_id
        if receipt_id is None:
            continue
        if purchase.payer == "pilot":
            arrival = hooks.arrived.get(("full_receipt_notification to the pilot bank", receipt_id))
            if arrival is None:
                unmatched += 1
            else:
                to_pilot.append(arrival - purchase.answered)
        elif purchase.payer == "enrolled" and purchase.transaction_answered:
            both = max(purchase.answered, purchase.transaction_answered)
            if receipt_id in matches:
                to_match.append(matches[receipt_id] - both)
            arrival = hooks.arrived.get(("receipt_notification to the issuer", receipt_id))
            if arrival is None:
                unmatched += 1
            else:
                to_issuer.append(arrival - both)
            if purchase.kind not in ("EMAIL", "CARD"):  # not delivered by a token first
                app = hooks.arrived.get(("receipt_notification to the app", receipt_id))
                if app is not None:
                    to_app.append(app - both)
    print("\nmatching delay (receipt and card transaction both acknowledged → …):")
    print(f"  the match's row (matched_at)               {spread(to_match)}")
    print(f"  the issuer's receipt_notification arrived  {spread(to_issuer)}")
    print(f"  the user's app's receipt_notification      {spread(to_app)}")
    print(f"  both present, no issuer notification: {unmatched:,}")
    print(f"pilot card: receipt answered → full_receipt_notification arrived  {spread(to_pilot)}")


def report(
    args: argparse.Namespace, load: Load, plan: Plan, sampler: Sampler, hooks: Webhooks,
    matches: dict[str, float], cpu: dict[str, float], left: tuple[int, int], hour_seconds: float,
) -> None:  # fmt: skip
    run_seconds = 24 * hour_seconds
    print(f"\nper endpoint ({run_seconds:.0f} s; latency of the 2xx answers from each request's"
          " due time):")  # fmt: skip
    print(f"  {'endpoint':<48} {'offered':>8} {'2xx':>8} {'p50 ms':>8} {'p99 ms':>8}  not 2xx")
    for name, tally in sorted(load.endpoints.items()):
        print(
            f"  {name:<48} {tally.offered:>8,} {tally.served:>8,} {tally.percentile(0.5):>8.1f}"
            f" {tally.percentile(0.99):>8.1f}  {tally.failures()}"
        )
    print(f"  (this generator sent them {spread([ms / 1000 for ms in load.late_ms])} after their"
          " due time: its own lateness, inside every latency above)")  # fmt: skip
    print("\nper compressed hour (all requests; offered and served a second, p99 of the 2xx):")
    print(f"  {'hour':<6} {'posts/s':>8} {'offered/s':>10} {'2xx/s':>8} {'p99 ms':>8}"
          f" {'503s':>7} {'other':>6}  load avg")  # fmt: skip
    for hour, tally in enumerate(load.hours):
        not_ok = sum(n for s, n in tally.statuses.items() if not 200 <= s < 300)
        load_average = sampler.growth[hour + 1][3] if hour + 1 < len(sampler.growth) else 0.0
        print(
            f"  {hour:02d}–{hour + 1:02d}  {plan.rate(hour):>8.0f}"
            f" {tally.offered / hour_seconds:>10.0f}"
            f" {tally.served / hour_seconds:>8.0f} {tally.percentile(0.99):>8.1f}"
            f" {tally.statuses[503]:>7,} {not_ok - tally.statuses[503]:>6,}  {load_average:.1f}"
        )
    print("\nwebhook lag (the delivery's row time → received):")
    for label, lags in sorted(hooks.lags.items()):
        print(f"  {label:<54} {spread(lags)}")
    print(f"  duplicates {hooks.duplicates}, written but not received {hooks.not_received:,};"
          f" after {DRAIN_SECONDS:.0f} s at most, still pending {left[0]:,}, payments still"
          f" queued for matching {left[1]:,}")  # fmt: skip
    report_matching(plan.purchases, hooks, matches)
    if args.replica:
        print("\nreplica lag (pg_stat_replication every 0.5 s):")
        print(f"  replay lag  {spread(sampler.lag_seconds)}")
        lag_kb = [b / 1024 for b in sampler.lag_bytes]
        print(f"  WAL not yet replayed  {spread(lag_kb, 'KB', 1.0)}")
    report_growth(sampler, hour_seconds)
    busy = cpu["machine"]
    ours = sum(v for k, v in cpu.items() if k != "machine")
    print(
        f"\nCPU over the day (seconds of {run_seconds:.0f} s × {os.cpu_count()} cores): "
        + ", ".join(f"{k} {v:.0f}" for k, v in cpu.items() if k != "machine")
        + f"; the whole machine {busy:.0f}, of which anything else {max(busy - ours, 0):.0f}"
    )


def report_growth(sampler: Sampler, hour_seconds: float) -> None:
    growth = sampler.growth
    if len(growth) < 2:
        return
    what = "receipts" if sampler.sqlite_file else "rows inserted in all tables"
    print(f"\ngrowth per compressed hour (database bytes, {what}, receipts):")
    per_receipt: list[float] = []
    for hour in range(len(growth) - 1):
        size, rows, receipts = (
            b - a for a, b in zip(growth[hour][:3], growth[hour + 1][:3], strict=True)
        )
        if receipts:
            per_receipt.append(size / receipts)
        real = FINLAND_RECEIPTS_A_DAY * HOURLY_WEIGHTS[hour] / sum(HOURLY_WEIGHTS)
        at_real = f"{size / receipts * real / 1e9:6.2f} GB" if receipts else "     –"
        print(
            f"  {hour:02d}–{hour + 1:02d}  {size / 1e6:8.1f} MB {rows:>9,} rows {receipts:>8,}"
            f" receipts  {size / max(receipts, 1):>7,.0f} B a receipt;"
            f" Finland's hour ({real:,.0f} receipts): {at_real}"
        )
    size = growth[-1][0] - growth[0][0]
    receipts = growth[-1][2] - growth[0][2]
    rows = growth[-1][1] - growth[0][1]
    if receipts:
        day = size / receipts * FINLAND_RECEIPTS_A_DAY
        print(
            f"  the day: {size / 1e9:.2f} GB, {rows:,} rows, {receipts:,} receipts:"
            f" {size / receipts:,.0f} bytes and {rows / receipts:.1f} rows a receipt;"
            f" at {FINLAND_RECEIPTS_A_DAY / 1e6:.1f} million receipts a day {day / 1e9:.1f} GB a"
            f" day, {day * 365 / 1e12:.1f} TB a year (hourly median"
            f" {statistics.median(per_receipt) if per_receipt else 0:,.0f} B a receipt)"
        )


# -- running it ----------------------------------------------------------------------------------


@contextmanager
def target(args: argparse.Namespace, workdir: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """The database kuitti runs on, and what kuitti's processes need besides."""
    if args.database == "sqlite":
        yield f"sqlite:///{workdir / 'day.db'}", {}
        return
    if not args.replica:
        with database("postgresql") as url:
            assert url is not None
            yield url, {}
        return
    with pg_cluster() as primary, pg_standby(primary, synchronous=False) as standby:
        yield primary.url, {"KUITTI_READ_DATABASE_URL": standby.url}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=("postgresql", "sqlite"), default="postgresql")
    parser.add_argument("--minutes", type=float, default=10.0, help="the day compressed into")
    parser.add_argument("--peak", type=float, default=1000.0, help="receipt posts/s at the peak")
    parser.add_argument("--replica", action="store_true", help="reads from a streaming standby")
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--cards", type=int, default=2000, help="enrolled cards, linked to users")
    parser.add_argument("--pilot-cards", type=int, default=100)
    parser.add_argument("--connections", type=int, default=256, help="most requests in flight")
    parser.add_argument("--processes", type=int, default=2, help="kuitti serve --workers")
    parser.add_argument("--seed", type=int, default=20261129)
    args = parser.parse_args()
    if args.replica and args.database != "postgresql":
        parser.error("--replica needs PostgreSQL")
    hour_seconds = args.minutes * 60 / 24
    print(
        f"a day in {args.minutes:g} minutes ({hour_seconds:.1f} s an hour), peak {args.peak:,.0f}"
        f" receipt posts/s; {args.database}{', reads from a standby' if args.replica else ''};"
        f" {args.users:,} users, {args.cards:,} enrolled cards, {args.pilot_cards:,} pilot cards;"
        f" {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the start",
        flush=True,
    )
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        workdir = Path(tmp)
        url, env = stack.enter_context(target(args, workdir))
        sqlite_file = workdir / "day.db" if args.database == "sqlite" else None
        receivers = start_receivers(dict(os.environ))
        stack.callback(stop_receivers, receivers)
        assert receivers.stdout is not None
        assert receivers.stdin is not None
        ports: list[int] = orjson.loads(_readline(receivers.stdout, 30))
        kuitti = Kuitti(url, workdir, args.processes, env)
        stack.callback(kuitti.stop)
        settings = make_settings(url, workdir / "var", kuitti.url, secret_key=SECRET)
        db = Database(settings.resolved_database_url, pool_size=2)
        stack.callback(db.dispose)
        services = Services(settings=settings, db=db, clock=SystemClock())
        began = time.monotonic()
        world = build_world(services, ports, args)
        roles = partner_roles(services)
        left = drain(url, sqlite_file)  # the cards' card_added
        print(f"world made in {time.monotonic() - began:.0f} s (webhooks left {left[0]})",
              flush=True)  # fmt: skip
        if sqlite_file is None:
            with psycopg.connect(url, autocommit=True) as connection:
                connection.execute("ANALYZE")
        plan = Plan(args, world, hour_seconds)
        load = Load(plan, world, kuitti.url, args.connections)
        sampler = Sampler(url, sqlite_file, hour_seconds, args.replica)
        since = datetime.now(UTC)
        pids = {"kuitti serve": kuitti.processes[0].pid, "kuitti worker": kuitti.processes[1].pid,
                "receivers": receivers.pid}  # fmt: skip
        cpu_before = {name: tree_cpu_seconds(pid) for name, pid in pids.items()}
        snapshot, machine_before = processes(), machine_busy_seconds()
        generator_before = time.process_time()
        sampler.start_monotonic = time.monotonic() + 0.5
        sampler.start()
        with collector_tuned(), asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(load.run())
        cpu = {name: tree_cpu_seconds(pid) - cpu_before[name] for name, pid in pids.items()}
        finished = processes()
        elsewhere = others(snapshot, finished, set(process_tree(os.getpid())))
        cpu["PostgreSQL (every cluster here)"] = postgres_seconds(finished) - postgres_seconds(
            snapshot
        )
        cpu["this load generator"] = time.process_time() - generator_before
        cpu["machine"] = machine_busy_seconds() - machine_before
        print(f"the day's requests done {time.monotonic() - sampler.start_monotonic:.0f} s after"
              f" the start; load average {os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
        left = drain(url, sqlite_file)
        sampler.stopped.set()
        sampler.join()
        receivers.stdin.write("dump\n")
        receivers.stdin.flush()
        received: dict[str, list[float]] = orjson.loads(_readline(receivers.stdout, 60))
        hooks = webhooks(url, sqlite_file, received, since, roles)
        matches = matched_at(url, sqlite_file, since)
        report(args, load, plan, sampler, hooks, matches, cpu, left, hour_seconds)
        print(f"the most CPU besides ours and PostgreSQL's during the day: {elsewhere}")
        print(f"tracebacks in kuitti's logs: {kuitti.tracebacks()}; load average"
              f" {os.getloadavg()[0]:.2f} at the end")  # fmt: skip


def partner_roles(services: Services) -> dict[str, str]:
    """Partner id → which receiver it is, for the webhook report."""
    names = {"Kuittikansio": "app", "Pankki": "issuer", "Pilot Bank": "pilot bank"}
    with services.db.session(write=False) as session:
        return {str(p.id): names.get(p.name, "partner") for p in session.query(Partner).all()}


if __name__ == "__main__":
    main()
