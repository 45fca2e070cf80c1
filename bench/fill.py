"""Fill a kuitti database with N realistic receipts, through its real schema, in minutes.

The database is migrated first (``kuitti db upgrade``); the partners are made by kuitti's own
``create_partner``, so their keys work against a server started on the database afterwards;
everything else is written with bulk SQL on the driver, not through HTTP: ``COPY`` on
PostgreSQL (psycopg), ``executemany`` on SQLite, a chunk of receipts per transaction. The rows
are the ones the ingest writer makes (``kuitti.posting.service``), with values in each
database's own form (UUIDs, UTC times, JSON, documents compressed on SQLite).

The shape, per receipt (``SHAPE`` below; N is ``--receipts``, a million by default):

- partners: eight merchants holding ``MERCHANT_SHARES`` of the receipts (the first, "Bench
  Market", the largest: it is the one the benches post and list as), each with a namespace of
  its own; one sandbox merchant; one partner app that users connect (``app``);
- users: one per ``RECEIPTS_PER_USER`` receipts, each with an active connection to the app;
- receipt times spread evenly over the year before ``--until``, written in time order (as a
  real service stores them: ids are time-ordered), created a few seconds after their time;
- a document of 1 to 60 product rows (most baskets small: mean about 9; all ``--rows`` if
  given), from a pool of ``TEMPLATES`` documents made by ``bench/ingest.py``'s
  ``realistic_receipt`` with the number and times of each receipt put in, signed as the ingest
  writer signs (``kuitti.signatures``);
- a CARD payment (``CARD_SHARE``), long decided (``expired``); a ``RECEIPT_ID`` token
  (``RECEIPT_ID_SHARE``: a link in its merchant's namespace, the resend hash set); an
  ``Idempotency-Key`` (``IDEMPOTENCY_SHARE``: the record with its answer);
- delivered to a user (``DELIVERED_SHARE``): the delivery, the app's grant through the
  connection, the app's webhook (delivered, one attempt) and, for half of them, the e-mail with
  the receipt's private link (sent);
- the sandbox merchant's receipts (``SANDBOX_SHARE``), for the delete measurements: nearly all
  are past ``KUITTI_SANDBOX_RETENTION_DAYS`` at ``--until``.

Every partner's receipt also has its ``posted`` grant. What the fill writes, and the partners'
keys and namespaces, are written as JSON to ``--keys`` (``bench/scale.py`` reads it).

    .venv/bin/python bench/fill.py sqlite:///tmp/full.db --receipts 2000000 --keys full.json
    .venv/bin/python bench/fill.py postgresql://kuitti:kuitti@127.0.0.1:5432/kuitti_full \\
        --receipts 2000000 --keys full.json

A PostgreSQL URL names a database that exists and is empty (``bench/scale.py`` makes one).
Beyond a few million, ``bench/grow.py`` multiplies a fill inside PostgreSQL, about twice as fast.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sqlite3
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ingest import realistic_receipt  # noqa: E402  (bench/ is the script's own directory)

from kuitti import signatures  # noqa: E402
from kuitti.db import Database, compressed_document  # noqa: E402
from kuitti.dbmigrate import upgrade  # noqa: E402
from kuitti.models.partners import PartnerRole  # noqa: E402
from kuitti.partners.service import create_partner  # noqa: E402
from kuitti.security import SecretBox  # noqa: E402
from kuitti.users.service import hash_password  # noqa: E402

MERCHANT_SHARES = (0.35, 0.2, 0.15, 0.1, 0.08, 0.06, 0.04, 0.02)
SHAPE: dict[str, float] = {
    "CARD_SHARE": 0.85,
    "RECEIPT_ID_SHARE": 0.30,
    "IDEMPOTENCY_SHARE": 0.25,
    "DELIVERED_SHARE": 0.10,
    "MAILED_SHARE_OF_DELIVERED": 0.5,
    "SANDBOX_SHARE": 0.01,
    "RECEIPTS_PER_USER": 100,
}
TEMPLATES = 400
CHUNK = 5000
SECRET_KEY = "bench-fill-secret-not-for-production"
HELSINKI = timedelta(hours=2)  # receipt times are written with +02:00, as Finnish tills do
ISSUER = "https://kuitti.example"  # the signatures' iss (KUITTI_ISSUER)


@dataclass(frozen=True)
class Template:
    """A document with ``@@NUMBER@@`` and ``@@TIME@@`` where each receipt's own go."""

    text: bytes
    merchant_name: str
    total: int
    card: dict[str, Any] | None


def templates(rng: random.Random, rows: int | None = None) -> list[Template]:
    """The pool of documents: ``rows`` product rows each, or the realistic spread if None."""
    made = []
    for index in range(TEMPLATES):
        count = rows or min(60, max(1, round(rng.expovariate(1 / 9))))
        doc = realistic_receipt(rng, index, count)
        card = doc["payments"][0] if rng.random() < SHAPE["CARD_SHARE"] else None
        if card is None:
            doc["payments"] = [{"type": "CASH", "amount": doc["totalPriceIncVAT"]}]
        else:
            card["attributes"]["timeStamp"] = "@@TIME@@"
        doc["receiptNumber"] = "@@NUMBER@@"
        doc["receiptTimeStamp"] = "@@TIME@@"
        made.append(
            Template(orjson.dumps(doc), doc["merchant"]["name"], doc["totalPriceIncVAT"], card)
        )
    return made


def uuid7_at(moment: datetime, rng: random.Random) -> uuid.UUID:
    """A version 7 UUID for ``moment``, as ``kuitti.ids.new_id`` makes one then."""
    value = (int(moment.timestamp() * 1000) << 80) | rng.getrandbits(80)
    value = (value & ~(0xF << 76)) | (0x7 << 76)
    value = (value & ~(0x3 << 62)) | (0x2 << 62)
    return uuid.UUID(int=value)


class Sink:
    """Rows into the database's tables: ``COPY`` on PostgreSQL, ``executemany`` on SQLite."""

    def __init__(self, url: str) -> None:
        self.sqlite = url.startswith("sqlite")
        if self.sqlite:
            self.lite = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
            self.lite.execute("PRAGMA journal_mode=WAL")
            self.lite.execute("PRAGMA synchronous=OFF")
            self.lite.execute("PRAGMA cache_size=-400000")
        else:
            self.pg = psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"))

    def uid(self, value: uuid.UUID | None) -> Any:
        if value is None:
            return None
        return value.hex if self.sqlite else value

    def at(self, value: datetime | None) -> Any:
        if value is None or not self.sqlite:
            return value
        return value.astimezone(UTC).isoformat(" ", "microseconds")[:-6]

    def flag(self, value: bool) -> Any:
        return int(value) if self.sqlite else value

    def document(self, value: bytes) -> Any:
        """A receipt document as kuitti stores it: compressed on SQLite (``DocumentText``)."""
        return compressed_document(value) if self.sqlite else value.decode()

    def write(self, tables: dict[str, tuple[Sequence[str], list[tuple[Any, ...]]]]) -> None:
        """One transaction: each table's rows, in the mapping's order."""
        if self.sqlite:
            self.lite.execute("BEGIN")
            for name, (columns, rows) in tables.items():
                if rows:
                    marks = ", ".join("?" * len(columns))
                    self.lite.executemany(
                        f"INSERT INTO {name} ({', '.join(columns)}) VALUES ({marks})",  # noqa: S608
                        rows,
                    )
            self.lite.execute("COMMIT")
            return
        with self.pg.cursor() as cursor:
            for name, (columns, rows) in tables.items():
                if rows:
                    with cursor.copy(f"COPY {name} ({', '.join(columns)}) FROM STDIN") as copy:
                        for row in rows:
                            copy.write_row(row)
        self.pg.commit()

    def finish(self) -> None:
        if self.sqlite:
            self.lite.execute("ANALYZE")
            self.lite.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self.lite.close()
        else:
            self.pg.autocommit = True
            self.pg.execute("VACUUM ANALYZE")
            self.pg.close()


RECEIPT = (
    "id", "partner_id", "document", "document_hash", "receipt_number", "receipt_time",
    "receipt_timestamp", "merchant_name", "total", "currency", "token_statuses", "created_at",
    "return_count", "sandbox", "signature",
)  # fmt: skip
GRANT = ("id", "partner_id", "receipt_id", "receipt_time", "reason", "connection_id")
LINK = ("namespace", "identifier", "receipt_id")
PAYMENT = (
    "id", "receipt_id", "payment_index", "status", "merchant_id", "amount", "currency", "paid_at",
    "masked_pan", "pan_last4", "authorization_code", "reference_number", "reason", "sandbox",
    "created_at", "updated_at",
)  # fmt: skip
IDEMPOTENCY = ("partner_id", "key", "request_hash", "status_code", "response_body", "created_at")
DELIVERY = ("user_id", "receipt_id", "receipt_time", "via", "created_at")
WEBHOOK = (
    "id", "partner_id", "notification_type", "payload", "bare_authorization", "delivered_at",
    "status", "attempt_count", "next_attempt_at", "created_at",
)  # fmt: skip
ATTEMPT = ("delivery_id", "at", "status_code", "latency_ms")
MAIL = (
    "id", "to_address", "receipt_id", "receipt_link", "sandbox", "sent_at", "status",
    "attempt_count", "next_attempt_at", "created_at",
)  # fmt: skip
USER = ("id", "email", "password_hash", "email_verified_at", "created_at")
CONNECTION = ("id", "user_id", "partner_id", "scope", "created_at", "updated_at")


@dataclass
class Partners:
    merchants: list[tuple[uuid.UUID, str]]  # (id, namespace)
    sandbox: uuid.UUID
    app: uuid.UUID
    keys: dict[str, Any]
    signing: signatures.LoadedKey


def make_partners(url: str, now: datetime) -> Partners:
    db = Database(url)
    upgrade(db)
    box = SecretBox(SECRET_KEY)
    keys: dict[str, Any] = {"merchants": []}
    merchants = []
    with db.session() as session:
        for index, share in enumerate(MERCHANT_SHARES):
            name = "Bench Market" if index == 0 else f"Kauppa {index} Oy"
            made = create_partner(
                session, box, name=name, roles=[PartnerRole.MERCHANT], now=now,
                namespaces=[f"bench{index}"],
            )  # fmt: skip
            merchants.append((made.partner.id, f"bench{index}"))
            keys["merchants"].append(
                {
                    "name": name,
                    "api_key": made.api_key,
                    "namespace": f"bench{index}",
                    "share": share,
                }
            )
        sandbox = create_partner(
            session, box, name="Testikauppa", roles=[PartnerRole.MERCHANT], now=now, sandbox=True
        )
        app = create_partner(
            session, box, name="Kuittisovellus", roles=[PartnerRole.APP], now=now,
            redirect_uris=["https://app.example/callback"],
        )  # fmt: skip
        keys["sandbox"] = {"api_key": sandbox.api_key}
        keys["app"] = {"api_key": app.api_key}
        ids = (sandbox.partner.id, app.partner.id)
        signing = signatures.current_key(session, box, now=now)
    db.engine.dispose()
    return Partners(merchants, *ids, keys, signing)


def fill(
    url: str, receipts: int, until: datetime, seed: int, product_rows: int | None = None
) -> dict[str, Any]:
    """``receipts`` receipts of ``product_rows`` rows each (None: the realistic spread)."""
    rng = random.Random(seed)
    start = until - timedelta(days=365)
    partners = make_partners(url, start)
    sink = Sink(url)
    pool = templates(rng, product_rows)
    users = max(1, int(receipts // SHAPE["RECEIPTS_PER_USER"]))
    password = hash_password("bench password")
    user_ids = [uuid7_at(start, rng) for _ in range(users)]
    connections = [uuid7_at(start, rng) for _ in range(users)]
    sink.write(
        {
            "users": (
                USER,
                [
                    (
                        sink.uid(u),
                        f"user{i}@bench.example",
                        password,
                        sink.at(start),
                        sink.at(start),
                    )
                    for i, u in enumerate(user_ids)
                ],
            ),
            "connections": (
                CONNECTION,
                [
                    (
                        sink.uid(c),
                        sink.uid(u),
                        sink.uid(partners.app),
                        "receipts",
                        sink.at(start),
                        sink.at(start),
                    )
                    for c, u in zip(connections, user_ids, strict=True)
                ],
            ),
        }
    )
    cumulative = [sum(MERCHANT_SHARES[: i + 1]) for i in range(len(MERCHANT_SHARES))]
    span = (until - start).total_seconds()
    counts = dict.fromkeys(
        ("receipts", "links", "payments", "idempotency", "deliveries", "webhooks", "mail"), 0
    )
    began = time.monotonic()
    for first in range(0, receipts, CHUNK):
        rows: dict[str, tuple[Sequence[str], list[tuple[Any, ...]]]] = {
            "receipts": (RECEIPT, []),
            "receipt_grants": (GRANT, []),
            "receipt_links": (LINK, []),
            "card_payments": (PAYMENT, []),
            "idempotency_records": (IDEMPOTENCY, []),
            "receipt_deliveries": (DELIVERY, []),
            "webhook_deliveries": (WEBHOOK, []),
            "mail_messages": (MAIL, []),
        }
        attempts: list[tuple[Any, ...]] = []
        for number in range(first, min(receipts, first + CHUNK)):
            moment = start + timedelta(seconds=span * (number + rng.random()) / receipts)
            created = moment + timedelta(seconds=rng.uniform(1, 20))
            receipt_id = uuid7_at(created, rng)
            sandbox = rng.random() < SHAPE["SANDBOX_SHARE"]
            if sandbox:
                partner_id, namespace = partners.sandbox, None
            else:
                pick = rng.random()
                index = next(
                    i for i, c in enumerate(cumulative) if pick <= c or c == cumulative[-1]
                )
                partner_id, namespace = partners.merchants[index]
            template = pool[rng.randrange(TEMPLATES)]
            stamp = (moment + HELSINKI).replace(tzinfo=None).isoformat(timespec="seconds")
            stamp += "+02:00"
            receipt_number = f"B-{number:09d}"
            document = template.text.replace(b"@@NUMBER@@", receipt_number.encode()).replace(
                b"@@TIME@@", stamp.encode()
            )
            tokens: list[dict[str, str]] = []
            document_hash = ""
            if namespace is not None and rng.random() < SHAPE["RECEIPT_ID_SHARE"]:
                identifier = f"{number:09d}-{rng.getrandbits(32):08x}"
                rows["receipt_links"][1].append((namespace, identifier, sink.uid(receipt_id)))
                tokens.append({"type": "RECEIPT_ID", "status": "link_created"})
                document_hash = hashlib.sha256(document).hexdigest()
            at_created = sink.at(created)
            signature = signatures.sign(
                partners.signing, document, receipt_id=receipt_id, partner_id=partner_id,
                issuer=ISSUER, now=created,
            )  # fmt: skip
            rows["receipts"][1].append(
                (sink.uid(receipt_id), sink.uid(partner_id),
                 sink.document(document), document_hash, receipt_number,
                 sink.at(moment), stamp, template.merchant_name, template.total, "EUR",
                 json.dumps(tokens), at_created, 0, sink.flag(sandbox), signature)
            )  # fmt: skip
            rows["receipt_grants"][1].append(
                (sink.uid(uuid7_at(created, rng)), sink.uid(partner_id), sink.uid(receipt_id),
                 sink.at(moment), "posted", None)
            )  # fmt: skip
            if template.card is not None:
                attrs = template.card["attributes"]
                reason = {"why": "expired", "detail": "No card fitted.", "checked_at": stamp}
                rows["card_payments"][1].append(
                    (sink.uid(uuid7_at(created, rng)), sink.uid(receipt_id), 0, "expired",
                     attrs["MID"], template.card["amount"], "EUR", sink.at(moment),
                     attrs["maskedPAN"], attrs["maskedPAN"][-4:], attrs["authorizationCode"],
                     attrs["referenceNumber"], json.dumps(reason), sink.flag(sandbox),
                     at_created, at_created)
                )  # fmt: skip
            if namespace is not None and rng.random() < SHAPE["IDEMPOTENCY_SHARE"]:
                answer = {"receipt_id": str(receipt_id), "tokens": tokens}
                rows["idempotency_records"][1].append(
                    (sink.uid(partner_id), f"idem-{number:09d}-{rng.getrandbits(32):08x}",
                     hashlib.sha256(document).hexdigest(), 200, json.dumps(answer), at_created)
                )  # fmt: skip
            if not sandbox and rng.random() < SHAPE["DELIVERED_SHARE"]:
                user = rng.randrange(users)
                at_sent = sink.at(created + timedelta(seconds=2))
                rows["receipt_deliveries"][1].append(
                    (sink.uid(user_ids[user]), sink.uid(receipt_id), sink.at(moment), "token",
                     at_created)
                )  # fmt: skip
                rows["receipt_grants"][1].append(
                    (sink.uid(uuid7_at(created, rng)), sink.uid(partners.app),
                     sink.uid(receipt_id), sink.at(moment), "connection",
                     sink.uid(connections[user]))
                )  # fmt: skip
                webhook_id = uuid7_at(created, rng)
                payload = json.dumps(
                    {"type": "receipt.delivered", "receipt_id": str(receipt_id),
                     "user": str(user_ids[user]), "receipt_time": stamp}
                )  # fmt: skip
                rows["webhook_deliveries"][1].append(
                    (sink.uid(webhook_id), sink.uid(partners.app), "receipt.delivered", payload,
                     sink.flag(False), at_sent, "delivered", 1, at_sent, at_created)
                )  # fmt: skip
                attempts.append((sink.uid(webhook_id), at_sent, 200, rng.randint(20, 300)))
                if rng.random() < SHAPE["MAILED_SHARE_OF_DELIVERED"]:
                    link = f"https://kuitti.example/r/{rng.getrandbits(256):064x}"
                    rows["mail_messages"][1].append(
                        (sink.uid(uuid7_at(created, rng)), f"user{user}@bench.example",
                         sink.uid(receipt_id), link, sink.flag(False), at_sent, "sent", 1,
                         at_created, at_created)
                    )  # fmt: skip
        rows["webhook_attempts"] = (ATTEMPT, attempts)
        sink.write(rows)
        for name, key in (
            ("receipts", "receipts"), ("receipt_links", "links"), ("card_payments", "payments"),
            ("idempotency_records", "idempotency"), ("receipt_deliveries", "deliveries"),
            ("webhook_deliveries", "webhooks"), ("mail_messages", "mail"),
        ):  # fmt: skip
            counts[key] += len(rows[name][1])
        done = min(receipts, first + CHUNK)
        if done % (CHUNK * 40) == 0 or done == receipts:
            rate = done / (time.monotonic() - began)
            print(f"  {done:>10,} receipts  {rate:,.0f}/s", file=sys.stderr, flush=True)
    sink.finish()
    return {
        "receipts": receipts,
        "until": until.isoformat(),
        "seconds": round(time.monotonic() - began, 1),
        "counts": counts,
        "users": users,
        **partners.keys,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="sqlite:///path/to/file.db or a PostgreSQL URL")
    parser.add_argument("--receipts", type=int, default=1_000_000)
    parser.add_argument("--until", default="2026-11-01T00:00:00+00:00", help="the year's end")
    parser.add_argument("--seed", type=int, default=44)
    parser.add_argument(
        "--sandbox-share", type=float, default=SHAPE["SANDBOX_SHARE"], help="of the receipts"
    )
    parser.add_argument("--keys", type=Path, required=True, help="where to write the summary")
    parser.add_argument(
        "--rows", type=int, default=None, help="product rows of every receipt (default: spread)"
    )
    args = parser.parse_args()
    until = datetime.fromisoformat(args.until)
    url = args.url
    if url.startswith(("postgresql://", "postgres://")):
        url = "postgresql+psycopg://" + url.split("://", 1)[1]
    SHAPE["SANDBOX_SHARE"] = args.sandbox_share
    summary = fill(url, args.receipts, until, args.seed, args.rows)
    args.keys.write_text(json.dumps(summary, indent=2))
    print(json.dumps({k: v for k, v in summary.items() if k != "merchants"}, indent=2))


if __name__ == "__main__":
    main()
