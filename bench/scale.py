"""Scale comparison: kuitti against a small database and a full one (``bench/fill.py``), in turns.

Two databases of the same shape: a small one (``--small`` receipts, 20,000 by default) and a full
one (``--receipts``, two million by default, or one filled before: ``--full URL --full-keys
JSON``). A kuitti server (``--workers`` processes, no in-process worker) runs on each, and
every case is measured against both in turns, ``--rounds`` times, one ``--seconds`` slice of
``wrk`` with ``--clients`` connections each:

- ``post card``: a receipt paid by card, no token (``bench/ingest.py``'s realistic receipts);
- ``post RECEIPT_ID``: the same with a ``RECEIPT_ID`` token, a new identifier each post;
- ``post Idempotency-Key``: the card receipt with a new ``Idempotency-Key`` each post;
- ``post EMAIL``: the same with an ``EMAIL`` token, the address of one of the fill's first
  ``HOLDERS`` users (verified, connected to the app; fewer if a database has fewer):
  delivered to the user, the app's grant and webhook, and an e-mail, in the post's transaction;
- ``post CARD``: the same with a ``CARD`` token naming one of ``HOLDERS`` cards of a card issuer
  ("Bench Issuer"), each enrolled for one of those users (``enrol_cards``, once per database):
  the issuer's grant, then delivered as ``post EMAIL`` is;
- ``post QR``: the same with a ``DYNAMIC_QR_CODE`` token, a value the app ("Kuittisovellus")
  asked for one of those users' connections (``app_tokens``, once per database; given the
  namespace ``benchapp`` if it has none): delivered as ``post EMAIL`` is;
- ``post USER``: the same with a ``USER`` token, an access token of the app for one of those
  users' connections (given ``receipt:write`` if it lacks it): delivered as ``post EMAIL`` is;
- ``list depth 0``: the first page of 50 of the largest merchant ("Bench Market");
- ``list deep``: its page after a cursor ``--depth`` receipts deep (on the small database, 90 %
  of its depth, which is all it has);
- ``delete``: not over HTTP: ``kuitti.receipts.sandbox.purge_batch`` (the sandbox clean-up's
  own batches: pages read ahead on SQLite, then one transaction) run in this process on the
  database, ``--delete-receipts`` sandbox receipts past their retention in batches of
  ``PURGE_BATCH`` (100 on SQLite, 500 on PostgreSQL); receipts deleted per second, the slowest
  batch and the longest write transaction. It needs no server and no keys: with ``--only
  delete`` none is started, and without ``--full-keys`` the full database's receipts are
  counted past their retention from today;
- ``retire``: not over HTTP either: retention's own deletes
  (``kuitti.retention.delete_expired_receipts``: per partner, oldest first, batches of
  ``RECEIPT_BATCH``, read ahead on SQLite) with a retention of ``RETENTION_DAYS`` and the clock
  where the oldest ``--delete-receipts`` production receipts are past it; the same figures.

Each delete turn also says the pages it read from storage a receipt (``read_bytes`` of
``/proc/self/io`` ÷ 4096) and this process's CPU a receipt. With ``--cold`` (SQLite) the
database file and its write-ahead log are put out of the operating system's cache before each
turn (``fsync``, then ``posix_fadvise`` ``DONTNEED``; what ``fincore`` still finds is printed),
as the pages of receipts a year old are in a service: reproducible without root's
``drop_caches``.

The answer is each case's rate and p99 on both, and full ÷ small. The machine's two cores are
shared (other work may be running): a ratio from slices in turns is what to read, not a rate.
Both databases' shapes are ``bench/fill.py``'s; the small one gets a quarter of its receipts as
sandbox receipts (``--small-sandbox-share``), so it has as many to delete in every turn.

    .venv/bin/python bench/scale.py --database postgresql --receipts 2000000
    .venv/bin/python bench/scale.py --database postgresql \\
        --full postgresql://kuitti:kuitti@127.0.0.1:5432/kuitti_full --full-keys full.json
    .venv/bin/python bench/scale.py --database sqlite --full /tmp/full.db --full-keys full.json \\
        --only list,delete
    .venv/bin/python bench/scale.py --database sqlite --full /tmp/full.db --only delete
    .venv/bin/python bench/scale.py --database sqlite --full /tmp/full.db --only retire,delete \\
        --cold

A full database given with ``--full`` gains the receipts posted and loses the receipts deleted
in each run; fill it again (``bench/fill.py``) when it runs out of sandbox receipts.
PostgreSQL databases made by the bench come from KUITTI_TEST_POSTGRES_URL (default
postgresql://kuitti:kuitti@127.0.0.1:5432/postgres) and are dropped afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
import orjson
import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fill import SECRET_KEY  # noqa: E402  (bench/ is the script's own directory)
from ingest import (  # noqa: E402
    LATENCY_DONE,
    PG_ADMIN_URL,
    WrkRun,
    free_port,
    kuitti_command,
    merged_percentile,
    realistic_receipt,
    run_wrk,
    running,
)
from sqlalchemy import Connection, event, func, select  # noqa: E402

from kuitti.asgi import RUN_WORKER_ENV  # noqa: E402
from kuitti.cards.service import check_card_request, enroll_card  # noqa: E402
from kuitti.cards.settler import settle_due_matches  # noqa: E402
from kuitti.clock import FrozenClock, SystemClock, as_utc  # noqa: E402
from kuitti.config import Settings  # noqa: E402
from kuitti.db import Database  # noqa: E402
from kuitti.delivery.qr import issue_qr_code  # noqa: E402
from kuitti.models import Card, Namespace, Partner, PartnerRole, ReceiptGrant, User  # noqa: E402
from kuitti.models.cards import CardMatch, CardPurchase, CardTransaction  # noqa: E402
from kuitti.models.oauth import Connection as AppConnection  # noqa: E402
from kuitti.models.receipts import GrantReason  # noqa: E402
from kuitti.oauth.scopes import Scope  # noqa: E402
from kuitti.oauth.tokens import issue_access_token  # noqa: E402
from kuitti.partners.service import create_partner  # noqa: E402
from kuitti.readahead import storage_reads  # noqa: E402
from kuitti.receipts.readers import encode_cursor  # noqa: E402
from kuitti.receipts.sandbox import PURGE_BATCH, purge_batch  # noqa: E402
from kuitti.retention import delete_expired_receipts  # noqa: E402
from kuitti.security import SecretBox  # noqa: E402
from kuitti.services import Services  # noqa: E402

CASES = (
    "post card",
    "post RECEIPT_ID",
    "post Idempotency-Key",
    "post EMAIL",
    "post CARD",
    "post QR",
    "post USER",
    "list depth 0",
    "list deep",
)
HOLDERS = 200  # users a delivering token reaches at most (the small database has 200)
ISSUER = "Bench Issuer"


def card_pan(index: int) -> str:
    return f"400012******{index:04d}"


@dataclass
class Instance:
    """One database and the kuitti server on it."""

    label: str
    url: str
    keys: dict[str, Any]
    url_base: str = ""
    cursor: str = ""
    depth: int = 0
    qr_codes: list[tuple[str, str]] = field(default_factory=list)  # (value, namespace)
    user_tokens: list[str] = field(default_factory=list)


def sqlalchemy_url(url: str) -> str:
    if url.startswith("postgresql://"):
        return "postgresql+psycopg://" + url.removeprefix("postgresql://")
    return url


def settings_of(instance: Instance, workdir: Path, **more: Any) -> Settings:
    """The settings of ``instance``'s server, for work the bench does on its database itself."""
    return Settings(
        database_url=sqlalchemy_url(instance.url),
        var_dir=workdir / f"var-{instance.label}",
        secret_key=SECRET_KEY,
        log_level="WARNING",
        **more,
    )


@contextmanager
def new_database(kind: str, workdir: Path, name: str) -> Iterator[str]:
    if kind == "sqlite":
        yield f"sqlite:///{workdir / f'{name}.db'}"
        return
    database = f"kuitti_scale_{name}_{secrets.token_hex(3)}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{database}"')
    try:
        yield f"{PG_ADMIN_URL.rpartition('/')[0]}/{database}"
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


def filled(
    url: str, receipts: int, keys: Path, sandbox_share: float | None = None
) -> dict[str, Any]:
    command = [sys.executable, str(ROOT / "bench" / "fill.py"), url, "--receipts", str(receipts)]
    command += ["--keys", str(keys)]
    if sandbox_share is not None:
        command += ["--sandbox-share", str(sandbox_share)]
    began = time.monotonic()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    print(f"  filled {receipts:,} receipts in {time.monotonic() - began:.0f} s", flush=True)
    summary: dict[str, Any] = json.loads(keys.read_text())
    return summary


def deep_cursor(instance: Instance, depth: int) -> tuple[str, int]:
    """The cursor of the largest merchant's page ``depth`` receipts deep (or 90 % of what it
    has, if less), and that depth."""
    db = Database(sqlalchemy_url(instance.url))
    try:
        with db.session(write=False) as session:
            partner = session.scalar(select(Partner.id).where(Partner.name == "Bench Market"))
            newest_first = (
                select(ReceiptGrant.receipt_time, ReceiptGrant.receipt_id)
                .where(ReceiptGrant.partner_id == partner)
                .order_by(ReceiptGrant.receipt_time.desc(), ReceiptGrant.receipt_id.desc())
            )
            count = session.scalar(select(func.count()).where(ReceiptGrant.partner_id == partner))
            assert count is not None
            depth = min(depth, int(count * 0.9))
            moment, receipt_id = session.execute(newest_first.offset(depth).limit(1)).one()
    finally:
        db.engine.dispose()
    return encode_cursor(moment, str(receipt_id)), depth


def enrol_cards(instance: Instance, count: int) -> None:
    """``count`` cards of the card issuer ``ISSUER`` (made if missing), card ``i`` enrolled
    for ``user{i}@bench.example``: what a ``post CARD`` token names. Enrolling again is a no-op
    (``enroll_card`` returns the enrolled card)."""
    db = Database(sqlalchemy_url(instance.url))
    now = datetime.now(UTC)
    try:
        with db.session() as session:
            issuer = session.scalar(select(Partner).where(Partner.name == ISSUER))
            if issuer is None:
                issuer = create_partner(
                    session, SecretBox(SECRET_KEY), name=ISSUER, roles=[PartnerRole.CARD_ISSUER],
                    now=now,
                ).partner  # fmt: skip
            emails = [f"user{i}@bench.example" for i in range(count)]
            found = session.execute(select(User.email, User.id).where(User.email.in_(emails)))
            holders = {row[0]: row[1] for row in found}
            for i, email in enumerate(emails):
                request = check_card_request(f"bench-card-{i}", card_pan(i), "2030-12", None)
                enroll_card(session, issuer, request, now=now, user_id=holders[email])
    finally:
        db.engine.dispose()


def app_tokens(instance: Instance, count: int, workdir: Path) -> None:
    """For the connections of ``user{i}@bench.example`` (``i`` < ``count``) to the app: a
    dynamic QR code value each, valid for a day, and an access token each, the connection
    given ``receipt:write`` first if it lacks it (what a ``USER`` token needs): what ``post
    QR`` and ``post USER`` name."""
    settings = settings_of(instance, workdir)
    db = Database(settings.resolved_database_url)
    now = datetime.now(UTC)
    emails = [f"user{i}@bench.example" for i in range(count)]
    try:
        with db.session() as session:
            app = session.scalar(select(Partner).where(Partner.name == "Kuittisovellus"))
            assert app is not None, "the fill's app is missing"
            if not app.namespaces:
                session.add(Namespace(name="benchapp", partner_id=app.id))
                session.flush()
                session.refresh(app)
            found = session.execute(
                select(User.email, AppConnection)
                .join(AppConnection, AppConnection.user_id == User.id)
                .where(User.email.in_(emails), AppConnection.partner_id == app.id)
            )
            connections = {row[0]: row[1] for row in found}
            for email in emails:
                connection = connections[email]
                if Scope.RECEIPT_WRITE.value not in connection.scopes:
                    connection.scope = f"{connection.scope} {Scope.RECEIPT_WRITE.value}"
                code = issue_qr_code(session, connection, ttl_seconds=86_400, now=now)
                instance.qr_codes.append((code.value, code.namespace))
                instance.user_tokens.append(
                    issue_access_token(session, settings, connection, app, code_hash=None, now=now)
                )
    finally:
        db.engine.dispose()


DELIVERING = ("post EMAIL", "post CARD", "post QR", "post USER")


def post_body(kind: str, instance: Instance, holder: int, doc: dict[str, Any]) -> Any:
    """What a ``kind`` post sends: ``doc`` alone, or in the token form with the case's token
    for ``holder`` (a ``RECEIPT_ID``'s value is ``@@ID@@``, for the script to fill in)."""
    namespace = instance.keys["merchants"][0]["namespace"]
    tokens = {
        "post RECEIPT_ID": {"type": "RECEIPT_ID", "namespace": namespace, "value": "@@ID@@"},
        "post EMAIL": {"type": "EMAIL", "value": f"user{holder}@bench.example"},
        "post CARD": {"type": "CARD", "id": f"bench-card-{holder}", "value": card_pan(holder)},
    }
    if instance.qr_codes:
        value, qr_namespace = instance.qr_codes[holder]
        tokens["post QR"] = {"type": "DYNAMIC_QR_CODE", "namespace": qr_namespace, "value": value}
        tokens["post USER"] = {"type": "USER", "value": instance.user_tokens[holder]}
    if kind in tokens:
        return {"attributes": {"tokens": [tokens[kind]]}, "receipt": doc}
    return doc


def check_delivered(instance: Instance, kind: str) -> None:
    """One ``kind`` post over HTTP, whose token must answer ``delivered``: the case measures
    a delivery, not a token that reaches nobody."""
    body = post_body(kind, instance, 0, realistic_receipt(random.Random(45), 0, 0))
    answer = httpx.post(
        f"{instance.url_base}/api/v1/receipts/",
        json=body,
        headers={"Authorization": f"Token {instance.keys['merchants'][0]['api_key']}"},
        timeout=60,
    )
    statuses = [token["status"] for token in answer.json().get("tokens", [])]
    assert answer.status_code == 200, (kind, answer.text[:300])
    assert statuses == ["delivered"], (kind, answer.text[:300])


def post_script(
    path: Path,
    api_key: str,
    kind: str,
    instance: Instance,
    holders: int,
    count: int = 200,
) -> None:
    """A wrk script posting ``count`` realistic card receipts in turn; for ``RECEIPT_ID`` and
    ``Idempotency-Key`` each post gets an identifier or key no post had (per run, thread and
    request); ``EMAIL``, ``CARD``, ``QR`` and ``USER`` name ``holders`` users, cards, QR code
    values and access tokens in turn."""
    rng = random.Random(44)
    heads, tails = [], []
    for number in range(count):
        body = post_body(kind, instance, number % holders, realistic_receipt(rng, number, 0))
        head, _, tail = orjson.dumps(body).decode().partition("@@ID@@")
        heads.append(head)
        tails.append(tail)
    run = secrets.token_hex(4)
    unique = "prefix .. run .. '-' .. tid .. '-' .. counter"
    path.write_text(
        f"""
local heads = {lua_list(heads)}
local tails = {lua_list(tails)}
local n = #heads
local i = 0
local counter = 0
local prefix = "bench-"
local run = "{run}"
local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end
wrk.method = "POST"
request = function()
  i = i % n + 1
  counter = counter + 1
  local headers = {{["Content-Type"] = "application/json", Authorization = "Token {api_key}"}}
  {'headers["Idempotency-Key"] = ' + unique if kind == "post Idempotency-Key" else ""}
  local body = heads[i]
  if tails[i] ~= "" or {str(kind == "post RECEIPT_ID").lower()} then
    body = heads[i] .. {unique if kind == "post RECEIPT_ID" else '""'} .. tails[i]
  end
  return wrk.format(nil, nil, headers, body)
end
{LATENCY_DONE}"""
    )


def lua_list(texts: list[str]) -> str:
    """A Lua table of strings (JSON's string escapes are Lua's too; the text stays UTF-8)."""
    return "{" + ",\n".join(json.dumps(text, ensure_ascii=False) for text in texts) + "}"


def get_script(path: Path, api_key: str, query: str) -> None:
    path.write_text(
        f"""
wrk.method = "GET"
wrk.path = "/api/v1/receipts/{query}"
wrk.headers["Authorization"] = "Token {api_key}"
{LATENCY_DONE}"""
    )


@dataclass
class MatchTurn:
    """Matching new receipts whose card's auth is stored: the matching step's time per receipt
    (``settle_due_matches``, as the worker runs it after the receipt's commit), in ms, and how
    many of them it matched to the card."""

    step_ms: list[float]
    matched: int


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98]


def match_turn(instance: Instance, receipts: int, workdir: Path, seed: int) -> MatchTurn:
    """Post ``receipts`` receipts over HTTP, each paid by one of the ``ISSUER``'s cards whose auth
    was stored just before (at a merchant id of the fill's, ``MID-0001`` to ``MID-0500``, which
    the full database's stored card payments share), and time the matching step after each.
    Payments queued before the turn (the posts of other cases) are decided first, untimed."""
    rng = random.Random(seed)
    settings = settings_of(instance, workdir)
    services = Services(
        settings=settings, db=Database(settings.resolved_database_url), clock=SystemClock()
    )
    merchant = instance.keys["merchants"][0]
    steps, matched = [], 0
    try:
        while settle_due_matches(services):
            pass
        with services.db.session(write=False) as session:
            cards = session.execute(
                select(Card.id, Card.masked_pan, Card.pan_last4)
                .join(Partner, Partner.id == Card.partner_id)
                .where(Partner.name == ISSUER)
            ).all()
        with httpx.Client(base_url=instance.url_base, timeout=60) as client:
            for number in range(receipts):
                card_id, masked_pan, last4 = rng.choice(cards)
                now = datetime.now(UTC)
                code, mid = f"{rng.randrange(10**6):06d}", f"MID-{rng.randint(1, 500):04d}"
                doc = realistic_receipt(rng, number, 0)
                amount = doc["totalPriceIncVAT"]
                stamp = now.astimezone(timezone(timedelta(hours=2))).isoformat(timespec="seconds")
                doc["receiptTimeStamp"] = stamp
                doc["payments"][0]["attributes"].update(
                    MID=mid, maskedPAN=masked_pan, authorizationCode=code, timeStamp=stamp
                )
                with services.db.session() as session:
                    purchase = CardPurchase(
                        id=uuid.uuid4(), card_id=card_id, merchant_id=mid, merchant_name="Bench",
                        authorization_code=code, reference_number=None, created_at=now,
                    )  # fmt: skip
                    session.add(purchase)
                    session.flush()
                    session.add(
                        CardTransaction(
                            id=uuid.uuid4(), card_id=card_id, purchase_id=purchase.id,
                            transaction_type="auth", amount=amount, currency="EUR",
                            occurred_at=now, merchant_id=mid, merchant_name="Bench",
                            reference_number=None, authorization_code=code, pan_last4=last4,
                            created_at=now,
                        )
                    )  # fmt: skip
                answer = client.post(
                    "/api/v1/receipts/",
                    json=doc,
                    headers={"Authorization": f"Token {merchant['api_key']}"},
                )
                assert answer.status_code == 200, answer.text
                started = time.perf_counter()
                settle_due_matches(services, expire=False)
                steps.append((time.perf_counter() - started) * 1000)
                with services.db.session(write=False) as session:
                    found = session.scalar(
                        select(func.count())
                        .select_from(CardMatch)
                        .where(CardMatch.receipt_id == uuid.UUID(answer.json()["receipt_id"]))
                    )
                matched += int(found or 0)
    finally:
        services.db.dispose()
    return MatchTurn(steps, matched)


RETENTION_DAYS = 335
"""The retention the ``retire`` case sets (``KUITTI_RECEIPT_RETENTION_DAYS``): at the fill's
``--until`` its oldest month is past it."""


def sqlite_files(instance: Instance) -> list[Path]:
    """The SQLite database file of ``instance`` and its write-ahead log, where they exist."""
    path = Path(instance.url.removeprefix("sqlite:///"))
    return [f for f in (path, path.with_name(path.name + "-wal")) if f.exists()]


def evict(instance: Instance) -> int | None:
    """Put ``instance``'s SQLite files out of the operating system's cache (written out first:
    only clean pages can go), as a database nobody has read for months is; the bytes of them
    still in memory afterwards, as ``fincore`` counts them (None where it is missing)."""
    files = sqlite_files(instance)
    for file in files:
        fd = os.open(file, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    if shutil.which("fincore") is None:
        return None
    answer = subprocess.run(
        ["fincore", "--bytes", "--noheadings", "--output", "RES", *map(str, files)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return sum(int(line) for line in answer.stdout.split())


@dataclass
class DeleteTurn:
    """Receipts deleted per second over a turn's batches, the slowest batch and the longest
    write transaction in ms (on SQLite, what a post may wait for), how many deleted, the pages
    read from storage a receipt (``/proc/self/io``; None where it is missing), the CPU of this
    process a receipt in ms, and after ``--cold`` the bytes of the files left in memory."""

    rate: float
    slowest_ms: float
    longest_write_ms: float
    deleted: int
    pages_per_receipt: float | None
    cpu_ms: float
    resident: int | None = None


def timed_deletes(db: Database, run: Callable[[], int]) -> DeleteTurn:
    """Run ``run`` (deleting in batches of one write transaction each; how many it deleted) on
    ``db`` and measure it: a batch is the time from the turn's start or the last batch's commit
    to its own commit (finding its receipts, reading ahead, writing)."""
    writes: list[float] = []
    commits: list[float] = []

    @event.listens_for(db.engine, "begin")
    def _began(connection: Connection) -> None:
        if db.dialect == "postgresql" or connection.get_execution_options().get("sqlite_begin"):
            connection.info["began"] = time.perf_counter()

    @event.listens_for(db.engine, "commit")
    def _committed(connection: Connection) -> None:
        if "began" in connection.info:
            commits.append(time.perf_counter())
            writes.append(commits[-1] - connection.info.pop("began"))

    reads, cpu, began = storage_reads(), time.process_time(), time.perf_counter()
    try:
        deleted = run()
    finally:
        db.engine.dispose()
    seconds, cpu = time.perf_counter() - began, time.process_time() - cpu
    read = storage_reads()
    pages = None
    if deleted and read is not None and reads is not None:
        pages = (read - reads) / 4096 / deleted
    batches = [b - a for a, b in zip([began, *commits], commits, strict=False)]
    return DeleteTurn(
        deleted / seconds if deleted else 0.0,
        max(batches, default=0.0) * 1000,
        max(writes, default=0.0) * 1000,
        deleted,
        pages,
        cpu * 1000 / deleted if deleted else 0.0,
    )


def describe(turn: DeleteTurn) -> str:
    """A turn's figures on one line."""
    pages = "?" if turn.pages_per_receipt is None else f"{turn.pages_per_receipt:.1f}"
    left = "" if turn.resident is None else f"; {turn.resident / 2**20:.1f} MiB left in cache"
    return (
        f"{turn.rate:>7.0f}/s  slowest batch {turn.slowest_ms:.0f} ms, longest write"
        f" {turn.longest_write_ms:.0f} ms ({turn.deleted} receipts, {pages} pages read and"
        f" {turn.cpu_ms:.2f} ms CPU a receipt{left}); load average {os.getloadavg()[0]:.1f}"
    )


def delete_turn(instance: Instance, receipts: int, cold: bool) -> DeleteTurn:
    """Purge batches of ``receipts`` in all on ``instance``'s database; with ``cold``, its files
    put out of the cache first."""
    resident = evict(instance) if cold else None
    db = Database(sqlalchemy_url(instance.url))
    batches = -(-receipts // PURGE_BATCH[db.dialect])
    until = instance.keys.get("until")
    now = datetime.fromisoformat(until) if until else datetime.now(UTC)

    def purge() -> int:
        deleted = 0
        for _ in range(batches):
            found, count = purge_batch(db, now=now, retention_days=7)
            deleted += count
            if found < PURGE_BATCH[db.dialect]:
                break
        return deleted

    turn = timed_deletes(db, purge)
    turn.resident = resident
    return turn


def retention_cutoff(db: Database, receipts: int) -> datetime | None:
    """The receipt time before which the oldest ``receipts`` production receipts lie (their
    partners' posted grants, through the grants' listing index: up to ``receipts`` entries a
    partner); None if there are no more."""
    times: list[datetime] = []
    with db.session(write=False) as session:
        partners = session.scalars(select(Partner.id).where(Partner.sandbox.is_(False))).all()
        for partner in partners:
            oldest = (
                select(ReceiptGrant.receipt_time)
                .where(
                    ReceiptGrant.partner_id == partner, ReceiptGrant.reason == GrantReason.POSTED
                )
                .order_by(ReceiptGrant.receipt_time)
                .limit(receipts + 1)
            )
            times += session.scalars(oldest)
    times.sort()
    return as_utc(times[min(receipts, len(times) - 1)]) if times else None


def retire_turn(instance: Instance, receipts: int, workdir: Path, cold: bool) -> DeleteTurn:
    """Retention's own deletes (``kuitti.retention.delete_expired_receipts``: per partner,
    oldest first, batches of ``RECEIPT_BATCH``, read ahead on SQLite) with a retention of
    ``RETENTION_DAYS`` and the clock where the oldest ``receipts`` production receipts are past
    it. With ``cold``, the files are put out of the cache after the clock is found."""
    settings = settings_of(instance, workdir, receipt_retention_days=RETENTION_DAYS)
    db = Database(settings.resolved_database_url)
    cutoff = retention_cutoff(db, receipts)
    db.engine.dispose()
    resident = evict(instance) if cold else None
    clock = FrozenClock((cutoff or datetime.now(UTC)) + timedelta(days=RETENTION_DAYS))
    services = Services(settings=settings, db=db, clock=clock)
    turn = timed_deletes(db, lambda: delete_expired_receipts(services) if cutoff else 0)
    turn.resident = resident
    return turn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=("sqlite", "postgresql"), default="postgresql")
    parser.add_argument("--receipts", type=int, default=2_000_000)
    parser.add_argument("--small", type=int, default=20_000)
    parser.add_argument("--small-sandbox-share", type=float, default=0.25)
    parser.add_argument("--full", help="a database bench/fill.py filled (URL or SQLite path)")
    parser.add_argument("--full-keys", type=Path, help="its --keys summary (not for --only delete)")
    parser.add_argument("--depth", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--delete-receipts", type=int, default=1000)
    parser.add_argument("--match-receipts", type=int, default=100, help="per turn of match")
    parser.add_argument(
        "--only",
        default="post,list,delete",
        help="post, list, delete, retire, match, or cases by name",
    )
    parser.add_argument(
        "--cold", action="store_true", help="SQLite: files out of the cache before each delete"
    )
    args = parser.parse_args()
    if args.cold and args.database != "sqlite":
        parser.error("--cold is for SQLite's files")
    only = set(args.only.split(","))
    cases = [c for c in CASES if c.split()[0] in only or c in only]

    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        workdir = Path(tmp)
        small = Instance(
            "small", stack.enter_context(new_database(args.database, workdir, "small")), {}
        )
        small.keys = filled(small.url, args.small, workdir / "small.json", args.small_sandbox_share)
        if args.full:
            full_url = args.full if "://" in args.full else f"sqlite:///{args.full}"
            keys = json.loads(args.full_keys.read_text()) if args.full_keys else {}
            full = Instance("full", full_url, keys)
        else:
            full = Instance(
                "full", stack.enter_context(new_database(args.database, workdir, "full")), {}
            )
            full.keys = filled(full.url, args.receipts, workdir / "full.json")
        instances = [small, full]
        holders = min(HOLDERS, *(int(i.keys.get("users", HOLDERS)) for i in instances))
        for instance in instances if cases or "match" in only else []:
            instance.cursor, instance.depth = deep_cursor(instance, args.depth)
            if "post CARD" in cases or "match" in only:
                enrol_cards(instance, holders)
            if "post QR" in cases or "post USER" in cases:
                app_tokens(instance, holders, workdir)
            port = free_port()
            env = {
                **os.environ,
                "PYTHONPATH": str(ROOT),
                "KUITTI_DATABASE_URL": instance.url,
                "KUITTI_VAR_DIR": str(workdir / f"var-{instance.label}"),
                "KUITTI_SECRET_KEY": SECRET_KEY,
                "KUITTI_LOG_LEVEL": "WARNING",
                RUN_WORKER_ENV: "0",
            }
            command = kuitti_command(port, args.workers, "")
            log = workdir / f"{instance.label}.log"
            stack.enter_context(running(command, env, f"http://127.0.0.1:{port}/healthz", log))
            instance.url_base = f"http://127.0.0.1:{port}"
            for case in (case for case in cases if case in DELIVERING):
                check_delivered(instance, case)
        stored = f"{full.keys['receipts']:,}" if "receipts" in full.keys else "(keys not given)"
        print(
            f"{args.database}: small {small.keys['receipts']:,} receipts (deep = {small.depth:,}),"
            f" full {stored} (deep = {full.depth:,}); {args.workers}"
            f" processes, {args.clients} clients, {args.seconds} s slices, {args.rounds} rounds"
            f" in turns; load average {os.getloadavg()[0]:.1f}",
            flush=True,
        )
        runs: dict[tuple[str, str], list[WrkRun]] = {}
        deletes: dict[tuple[str, str], list[DeleteTurn]] = {}
        matches: dict[str, list[MatchTurn]] = {"small": [], "full": []}
        for round_number in range(args.rounds):
            for case in cases:
                for instance in instances:
                    merchant = instance.keys["merchants"][0]
                    script = (
                        workdir / f"{instance.label}-{round_number}-{case.replace(' ', '_')}.lua"
                    )
                    if case.startswith("post"):
                        post_script(script, merchant["api_key"], case, instance, holders)
                        target = f"{instance.url_base}/api/v1/receipts/"
                    else:
                        query = "?limit=50" + (
                            f"&cursor={instance.cursor}" if case == "list deep" else ""
                        )
                        get_script(script, merchant["api_key"], query)
                        target = instance.url_base
                    run = run_wrk(target, script, args.clients, args.seconds)
                    runs.setdefault((case, instance.label), []).append(run)
                    print(f"  round {round_number + 1} {case:<22} {instance.label:<5}"
                          f" {run.requests_per_second:>7.0f}/s  p99 {run.p99_ms:>7.1f} ms"
                          f"  non-2xx {run.non_2xx}", flush=True)  # fmt: skip
            if "match" in only:
                for instance in instances:
                    seed = round_number * 2 + len(matches[instance.label])
                    match = match_turn(instance, args.match_receipts, workdir, seed)
                    matches[instance.label].append(match)
                    print(f"  round {round_number + 1} {'match':<22} {instance.label:<5}"
                          f" step median {statistics.median(match.step_ms):.2f} ms, p99"
                          f" {p99(match.step_ms):.2f} ms; matched {match.matched}"
                          f" of {len(match.step_ms)}", flush=True)  # fmt: skip
            for kind in ("delete", "retire") if only & {"delete", "retire"} else ():
                for instance in instances if kind in only else ():
                    if kind == "delete":
                        turn = delete_turn(instance, args.delete_receipts, args.cold)
                    else:
                        turn = retire_turn(instance, args.delete_receipts, workdir, args.cold)
                    deletes.setdefault((kind, instance.label), []).append(turn)
                    print(f"  round {round_number + 1} {kind:<22} {instance.label:<5}"
                          f" {describe(turn)}", flush=True)  # fmt: skip
        print("\ncase                    small /s  p99 ms    full /s  p99 ms   rate ÷   p99 ×")
        for case in cases:
            a, b = runs[(case, "small")], runs[(case, "full")]
            rate_a = sum(r.requests for r in a) / (args.seconds * len(a))
            rate_b = sum(r.requests for r in b) / (args.seconds * len(b))
            p99_a, p99_b = merged_percentile(a, 99.0), merged_percentile(b, 99.0)
            errors = sum(r.non_2xx for r in a + b)
            print(f"{case:<22} {rate_a:>9.0f} {p99_a:>7.1f} {rate_b:>10.0f} {p99_b:>7.1f}"
                  f" {rate_b / rate_a:>8.2f} {p99_b / p99_a:>7.2f}"
                  + (f"  non-2xx {errors}" if errors else ""))  # fmt: skip
        for kind in ("delete", "retire"):
            ta, tb = deletes.get((kind, "small"), []), deletes.get((kind, "full"), [])
            if ta and tb and all(t.deleted for t in ta + tb):
                a_rate, b_rate = (
                    statistics.mean(t.rate for t in ta),
                    statistics.mean(t.rate for t in tb),
                )
                a_slow, b_slow = max(t.slowest_ms for t in ta), max(t.slowest_ms for t in tb)
                print(f"{kind + ' (slowest batch)':<22} {a_rate:>9.0f} {a_slow:>7.0f}"
                      f" {b_rate:>10.0f} {b_slow:>7.0f} {b_rate / a_rate:>8.2f}"
                      f" {b_slow / a_slow:>7.2f}")  # fmt: skip
                a_write = max(t.longest_write_ms for t in ta)
                b_write = max(t.longest_write_ms for t in tb)
                print(f"  longest write transaction: small {a_write:.0f} ms, full {b_write:.0f} ms"
                      f"{' (cold)' if args.cold else ''}")  # fmt: skip
        if matches["small"] and matches["full"]:
            a_steps = [ms for turn in matches["small"] for ms in turn.step_ms]
            b_steps = [ms for turn in matches["full"] for ms in turn.step_ms]
            a_med, b_med = statistics.median(a_steps), statistics.median(b_steps)
            a_p99, b_p99 = p99(a_steps), p99(b_steps)
            print(f"{'match (step median)':<22} {a_med:>9.2f} {a_p99:>7.2f} {b_med:>10.2f}"
                  f" {b_p99:>7.2f} {b_med / a_med:>8.2f} {b_p99 / a_p99:>7.2f}"
                  f"  (ms; ÷ and × full against small)")  # fmt: skip
            with ExitStack() as counting:
                for instance in instances:
                    url = instance.url.replace("postgresql+psycopg://", "postgresql://")
                    if url.startswith("postgresql://"):
                        pg = counting.enter_context(psycopg.connect(url))
                        row = pg.execute("SELECT count(*) FROM card_payments").fetchone()
                        print(f"card payments stored in {instance.label}: {row[0] if row else 0:,}")
        print(f"load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
