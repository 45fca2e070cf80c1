"""Card-linking benchmark: precision, recall, matches/s and request latency on a generated world,
and the cost of matching one receipt at 10,000 vs 1,000,000 stored transactions.

The world (assumptions written out in docs/matching.md, "Benchmark"):

* 100,000 enrolled cards across four BINs (so masked PANs ``BIN******last4`` collide: about
  2.5 enrolled cards share each BIN and last four), bulk-inserted into the database (enrolling
  them over HTTP would only measure enrolment);
* shoppers: 40 % pay with an enrolled card, 60 % with a card of the same BINs that nobody
  enrolled (their receipts must never match anyone);
* merchants with several terminals sharing one MID: cafés with a small menu (many equal
  amounts), grocers, restaurants (tips: the clearing and the receipt carry the bill plus tip, the
  auth the bill), fuel stations (auth = preAuthorizedAmount, receipt and clearing the actual sum);
* regulars: 0.3 % of enrolled cards buy the same coffee at the same café every day;
* four days of purchases with a daytime peak; POS clock skew against the issuer ±90 s; receipts
  reach kuitti after ~30 s (5 % hours late);
* three issuers that report differently: bank 0 sends an auth 0–5 s after the purchase and a
  clearing stamped when it clears, 2 hours to 4 days later; bank 1 sends the auth and a clearing
  stamped with the purchase time (arriving 1–3 days later); bank 2 sends no auth at all, only a
  clearing stamped when it clears, 8 hours to 3.5 days later;
* fuel receipts show the pre-authorised amount only half of the time;
* noise: 20 % of receipts carry no authorization code (half of those no reference number
  either), 25 % show only the last four digits, 10 % of issuer transactions carry no codes, 1 %
  of enrolled purchases never reach kuitti as transactions (not matchable), 3 % split tender
  (two cards), 2 % refunds (a RETURN receipt and a negative clearing);
* everything is posted through the real HTTP API (uvicorn on loopback, sequentially, in order
  of arrival, the server's clock moved to each arrival), then the clock runs 8 days on.

    .venv/bin/python bench/matching.py --quick          # sanity: 10,000 cards, 1,500 purchases
    .venv/bin/python bench/matching.py                  # 100,000 cards, 12,000 purchases
    .venv/bin/python bench/matching.py --scale          # also: cost at 10k vs 1M transactions
    .venv/bin/python bench/matching.py --database postgresql
    .venv/bin/python bench/matching.py --harsh          # far more receipts without codes
    .venv/bin/python bench/matching.py --pilot 200 --database postgresql --worker-process
                            # pilot receipts: from the POST's answer to the bank's webhook

The receipts are matched after their commit by the matching worker's step; the benchmark runs
that step after each receipt (as a worker woken by the commit does) and every 30 simulated
seconds (the sweep). ``--pilot N`` instead measures real time with a real worker: N pilot
receipts posted one after another, each timed from the POST's answer to the arrival of its
``full_receipt_notification`` at a webhook receiver on loopback — the worker in this process
(woken at the commit), or with ``--worker-process`` a ``kuitti worker`` process (woken by
PostgreSQL's NOTIFY, or on SQLite by its 30 s sweep).

Precision and recall are also printed per category of payment: fuel, tips, refunds, split
tender, regulars (the daily coffee), other purchases, and strangers whose masked PAN collides
with an enrolled card's (any match of theirs is wrong).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import operator
import os
import random
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import httpx
import psycopg
import uvicorn
from sqlalchemy import insert, select, text

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kuitti.app import create_app  # noqa: E402
from kuitti.cards.explain import explain_receipt  # noqa: E402
from kuitti.cards.service import check_card_request, enroll_card  # noqa: E402
from kuitti.cards.settler import settle_due_matches  # noqa: E402
from kuitti.cards.wakeups import MATCHING  # noqa: E402
from kuitti.clock import FrozenClock  # noqa: E402
from kuitti.config import Settings  # noqa: E402
from kuitti.db import Database  # noqa: E402
from kuitti.dbmigrate import upgrade  # noqa: E402
from kuitti.metrics import CARD_MATCH_WAITS, CARD_MATCHING_SECONDS  # noqa: E402
from kuitti.models import Card, PartnerRole  # noqa: E402
from kuitti.models.cards import (  # noqa: E402
    CardMatch,
    CardPaymentRecord,
    CardPurchase,
    CardTransaction,
)
from kuitti.partners.service import create_partner  # noqa: E402
from kuitti.security import SecretBox  # noqa: E402
from kuitti.services import Services  # noqa: E402
from kuitti.worker import run_worker  # noqa: E402

PG_ADMIN_URL = os.environ.get(
    "KUITTI_TEST_POSTGRES_URL", "postgresql://kuitti:kuitti@127.0.0.1:5432/postgres"
)
BINS = ("415301", "552211", "490012", "535110")
DAY = datetime(2026, 3, 2, tzinfo=UTC)
CAFE_MENU = (250, 320, 350, 420, 480, 550, 690)
ALNUM = "ABCDEFGHJKLMNPQRSTUVWXYZ0123456789"


# -- the world ---------------------------------------------------------------------------------


@dataclass
class Shopper:
    first6: str
    last4: str
    card_index: int | None  # index of the enrolled card, None: nobody enrolled this card
    issuer: int


@dataclass
class Merchant:
    name: str
    mid: str
    kind: str  # cafe, grocer, restaurant, fuel
    terminals: int


CLEARING_LAG_HOURS = {0: (2.0, 96.0), 1: (24.0, 72.0), 2: (8.0, 84.0)}
"""When each issuer's clearings clear (and reach kuitti), in hours after the purchase."""
PURCHASE_TIME_BANK = 1  # stamps its clearings with the purchase time
NO_AUTH_BANK = 2  # sends no auth, only the clearing
CATEGORIES = ("fuel", "tip", "refund", "split", "regular", "other", "stranger (collides)")


@dataclass
class Payment:
    shopper: Shopper
    amount: int
    paid_at: datetime  # POS time
    auth_code: str
    reference: str
    pre_authorized: int | None = None
    auth_amount: int | None = None  # None: no auth (refunds)
    clearing_amount: int | None = None
    show_code: bool = True
    show_reference: bool = True
    last4_only: bool = False
    issuer_codes: bool = True
    lost: bool = False  # the issuer never reports it
    category: str = "other"
    cleared_at: datetime | None = None


@dataclass
class Purchase:
    merchant: Merchant
    payments: list[Payment]
    refund: bool = False
    receipt_arrival: datetime = DAY


@dataclass
class Event:
    at: datetime
    order: int
    kind: str  # receipt, auth, clearing
    purchase: Purchase
    payment: Payment | None = None


@dataclass
class World:
    cards: list[tuple[str, str, int]]  # first6, last4, issuer
    merchants: list[Merchant]
    purchases: list[Purchase]
    card_ids: list[uuid.UUID] = field(default_factory=list)


def code(rng: random.Random, n: int = 6) -> str:
    return "".join(rng.choice(ALNUM) for _ in range(n))


@dataclass(frozen=True)
class Noise:
    """Shares of payments with each kind of noise (``--harsh`` raises them)."""

    receipt_without_code: float = 0.20
    last4_only: float = 0.25
    issuer_without_codes: float = 0.10
    last4_values: int = 10_000  # fewer: masked PANs collide far more often than in reality


HARSH = Noise(receipt_without_code=0.60, last4_only=0.60, issuer_without_codes=0.40)


def build_world(
    rng: random.Random, n_cards: int, n_purchases: int, n_merchants: int, noise: Noise, days: int
) -> World:
    cards = [
        (rng.choice(BINS), f"{rng.randrange(10000):04d}", rng.randrange(3)) for _ in range(n_cards)
    ]
    kinds = ["cafe"] * 4 + ["grocer"] * 4 + ["restaurant"] * 2 + ["fuel"] * 1
    merchants = [
        Merchant(f"Merchant {i}", f"MID{i:07d}", rng.choice(kinds), rng.randint(1, 6))
        for i in range(n_merchants)
    ]
    # A few big merchants take much of the traffic (Zipf-like), so equal amounts meet.
    weights = [1.0 / (i + 1) ** 0.8 for i in range(n_merchants)]
    purchases: list[Purchase] = []

    def shopper() -> Shopper:
        if rng.random() < 0.40:
            index = rng.randrange(n_cards)
            first6, last4, issuer = cards[index]
            return Shopper(first6, last4, index, issuer)
        last4 = f"{rng.randrange(noise.last4_values):04d}"
        return Shopper(rng.choice(BINS), last4, None, rng.randrange(3))

    for _ in range(n_purchases):
        merchant = rng.choices(merchants, weights)[0]
        # Daytime peak: most purchases between 07:00 and 21:00.
        hour = min(23.99, max(0.0, rng.gauss(14, 3.5)))
        at = DAY + timedelta(days=rng.randrange(days), hours=hour, seconds=rng.random())
        refund = rng.random() < 0.02
        if merchant.kind == "cafe":
            total = rng.choice(CAFE_MENU) * rng.randint(1, 2)
        elif merchant.kind == "fuel":
            total = rng.randint(1500, 9500)
        else:
            total = rng.randint(150, 25000)
        splits = [total]
        if not refund and rng.random() < 0.03 and total > 400:
            first = rng.randint(100, total - 100)
            splits = [first, total - first]
        payments = []
        for part in splits:
            amount = -part if refund else part
            payment = Payment(
                shopper(),
                amount,
                at,
                code(rng),
                f"{rng.randrange(10**12):012d}",
                show_code=rng.random() >= noise.receipt_without_code,
                last4_only=rng.random() < noise.last4_only,
                issuer_codes=rng.random() >= noise.issuer_without_codes,
                lost=rng.random() < 0.01,
            )
            payment.show_reference = payment.show_code or rng.random() < 0.5
            if refund:
                payment.category = "refund"
                payment.auth_amount = None
                payment.clearing_amount = amount
                payment.show_code = False  # refunds carry a reference number only
                payment.show_reference = True
            elif merchant.kind == "fuel" and len(splits) == 1:
                payment.category = "fuel"
                payment.auth_amount = rng.choice((10000, 15000))
                if rng.random() < 0.5:  # half the receipts show the pre-authorised amount
                    payment.pre_authorized = payment.auth_amount
                payment.clearing_amount = amount
            elif merchant.kind == "restaurant" and len(splits) == 1 and rng.random() < 0.5:
                payment.category = "tip"
                tip = rng.randint(50, max(60, amount // 8))
                payment.auth_amount = amount
                payment.amount = amount + tip
                payment.clearing_amount = amount + tip
            else:
                payment.category = "split" if len(splits) > 1 else "other"
                payment.auth_amount = amount
                payment.clearing_amount = amount
            payments.append(payment)
        purchase = Purchase(merchant, payments, refund)
        delay = rng.expovariate(1 / 30)
        if rng.random() < 0.05:
            delay = rng.uniform(3600, 6 * 3600)
        purchase.receipt_arrival = at + timedelta(seconds=delay)
        purchases.append(purchase)
    purchases.extend(regulars(rng, cards, merchants, noise, days))
    enrolled_pans = {(first6, last4) for first6, last4, _ in cards}
    enrolled_last4 = {last4 for _, last4, _ in cards}
    for purchase in purchases:
        for payment in purchase.payments:
            who = payment.shopper
            if who.card_index is None and (
                who.last4 in enrolled_last4
                if payment.last4_only
                else (who.first6, who.last4) in enrolled_pans
            ):
                payment.category = "stranger (collides)"
    return World(cards, merchants, purchases)


def regulars(
    rng: random.Random,
    cards: list[tuple[str, str, int]],
    merchants: list[Merchant],
    noise: Noise,
    days: int,
) -> list[Purchase]:
    """0.3 % of enrolled cards buy the same coffee at the same café every day at about the same
    time: same card, same merchant id, same amount — the purchases a week-long clearing window
    makes fit each other's receipts."""
    cafes = [m for m in merchants if m.kind == "cafe"][:5] or merchants[:1]
    out = []
    for index in rng.sample(range(len(cards)), k=max(1, len(cards) * 3 // 1000)):
        first6, last4, issuer = cards[index]
        cafe, amount = rng.choice(cafes), rng.choice(CAFE_MENU)
        hour = rng.uniform(7, 10)
        for day in range(days):
            at = DAY + timedelta(days=day, hours=hour, minutes=rng.uniform(-20, 20))
            payment = Payment(
                Shopper(first6, last4, index, issuer),
                amount,
                at,
                code(rng),
                f"{rng.randrange(10**12):012d}",
                show_code=rng.random() >= noise.receipt_without_code,
                last4_only=rng.random() < noise.last4_only,
                issuer_codes=rng.random() >= noise.issuer_without_codes,
                category="regular",
            )
            payment.show_reference = payment.show_code or rng.random() < 0.5
            payment.auth_amount = payment.clearing_amount = amount
            purchase = Purchase(cafe, [payment])
            purchase.receipt_arrival = at + timedelta(seconds=rng.expovariate(1 / 30))
            out.append(purchase)
    return out


def events_of(rng: random.Random, world: World) -> list[Event]:
    events: list[Event] = []
    order = 0
    for purchase in world.purchases:
        events.append(Event(purchase.receipt_arrival, order, "receipt", purchase))
        order += 1
        for payment in purchase.payments:
            if payment.shopper.card_index is None or payment.lost:
                continue
            bank = payment.shopper.issuer
            if payment.auth_amount is not None and bank != NO_AUTH_BANK:
                events.append(
                    Event(
                        payment.paid_at + timedelta(seconds=rng.uniform(0, 5)),
                        order,
                        "auth",
                        purchase,
                        payment,
                    )
                )
                order += 1
            if payment.clearing_amount is not None:
                low, high = CLEARING_LAG_HOURS[bank]
                payment.cleared_at = payment.paid_at + timedelta(hours=rng.uniform(low, high))
                events.append(Event(payment.cleared_at, order, "clearing", purchase, payment))
                order += 1
    events.sort(key=lambda e: (e.at, e.order))
    return events


# -- documents -----------------------------------------------------------------------------------


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def receipt_body(purchase: Purchase, number: int) -> dict[str, Any]:
    total = sum(p.amount for p in purchase.payments)
    exc = round(total * 100 / 114)
    payments = []
    for payment in purchase.payments:
        shopper = payment.shopper
        masked = (
            "************" if payment.last4_only else shopper.first6 + "******"
        ) + shopper.last4
        attrs: dict[str, Any] = {
            "transactionType": "REFUND" if purchase.refund else "PURCHASE",
            "currencyISOCode": "EUR",
            "MID": purchase.merchant.mid,
            "timeStamp": iso(payment.paid_at),
            "terminalId": f"T{number % purchase.merchant.terminals}",
            "maskedPAN": masked,
            "cardType": "DEBIT",
        }
        if payment.show_code:
            attrs["authorizationCode"] = payment.auth_code
        if payment.show_reference:
            attrs["referenceNumber"] = payment.reference
        if payment.pre_authorized is not None:
            attrs["preAuthorizedAmount"] = payment.pre_authorized
        payments.append({"type": "CARD", "amount": payment.amount, "attributes": attrs})
    return {
        "type": "RETURN" if purchase.refund else "PURCHASE",
        "merchant": {"name": purchase.merchant.name, "companyID": "1234567-8"},
        "products": [
            {
                "name": "Ostokset",
                "quantity": "1",
                "quantityCode": "pcs",
                "unitPriceIncVAT": total,
                "totalAmountExcVAT": exc,
                "totalAmountIncVAT": total,
                "vats": [
                    {
                        "VATRate": "14",
                        "VATAmount": total - exc,
                        "totalAmountExcVAT": exc,
                        "totalAmountIncVAT": total,
                    }
                ],
            }
        ],
        "vats": [
            {
                "VATRate": "14",
                "totalVATAmount": total - exc,
                "totalAmountExcVAT": exc,
                "totalAmountIncVAT": total,
            }
        ],
        "payments": payments,
        "receiptNumber": f"R{number}",
        "receiptTimeStamp": iso(purchase.payments[0].paid_at),
        "currencyISOCode": "EUR",
        "totalVATAmount": total - exc,
        "totalPriceExcVAT": exc,
        "totalPriceIncVAT": total,
    }


def transaction_body(
    rng: random.Random, world: World, event: Event, skew: timedelta
) -> dict[str, Any]:
    payment = event.payment
    assert payment is not None
    assert payment.shopper.card_index is not None
    index = payment.shopper.card_index
    is_auth = event.kind == "auth"
    amount = payment.auth_amount if is_auth else payment.clearing_amount
    # The issuer's clock differs from the POS's. A clearing is stamped when it clears, except
    # by the bank that stamps it with the purchase time.
    if is_auth or payment.shopper.issuer == PURCHASE_TIME_BANK:
        stamp = payment.paid_at + skew + timedelta(seconds=0 if is_auth else rng.uniform(0, 2))
    else:
        assert payment.cleared_at is not None
        stamp = payment.cleared_at
    body: dict[str, Any] = {
        "service_card_id": str(world.card_ids[index]),
        "transaction_type": event.kind,
        "amount": amount,
        "currency": "EUR",
        "timestamp": iso(stamp),
        "merchant_id": event.purchase.merchant.mid,
        "merchant_name": event.purchase.merchant.name.upper(),
    }
    if payment.issuer_codes:
        if not event.purchase.refund:
            body["authorization_code"] = payment.auth_code
        body["reference_number"] = payment.reference
    return body


# -- running -------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Server:
    def __init__(self, services: Services) -> None:
        port = free_port()
        app = create_app(services.settings, db=services.db, clock=services.clock)
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
        )
        self.url = f"http://127.0.0.1:{port}"
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Server:
        self.thread.start()
        while not self.server.started:
            time.sleep(0.01)
        return self

    def __exit__(self, *_exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def make_services(database: str, workdir: Path, clock: FrozenClock) -> tuple[Services, str | None]:
    pg_name = None
    if database == "postgresql":
        pg_name = f"kuitti_bench_{secrets.token_hex(4)}"
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{pg_name}"')
        url = f"{PG_ADMIN_URL.rpartition('/')[0]}/{pg_name}"
    else:
        url = f"sqlite:///{workdir / 'bench.db'}"
    settings = Settings(
        database_url=url,
        var_dir=workdir,
        secret_key="bench-secret-key-not-for-production",
        log_level="WARNING",
        webhook_allow_insecure=True,
    )
    db = Database(settings.resolved_database_url, pool_size=5)
    upgrade(db)
    return Services(settings=settings, db=db, clock=clock), pg_name


def enrol_cards(services: Services, world: World, issuers: list[uuid.UUID]) -> None:
    now = services.clock.now()
    rows = []
    for i, (first6, last4, issuer) in enumerate(world.cards):
        card_id = uuid.uuid4()
        world.card_ids.append(card_id)
        rows.append(
            {
                "id": card_id,
                "partner_id": issuers[issuer],
                "partner_card_id": f"c{i}",
                "masked_pan": f"{first6}******{last4}",
                "pan_first6": first6,
                "pan_last4": last4,
                "exp_date": datetime(2029, 12, 31, tzinfo=UTC),
                "holder_name": None,
                "user_id": None,
                "pilot": False,
                "created_at": now,
            }
        )
    with services.db.session() as session:
        for start in range(0, len(rows), 10000):
            session.execute(insert(Card), rows[start : start + 10000])


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run_world(args: argparse.Namespace, services: Services, clock: FrozenClock, url: str) -> None:
    rng = random.Random(args.seed)
    started = time.perf_counter()
    noise = HARSH if args.harsh else Noise()
    if args.last4_values:
        noise = dataclasses.replace(noise, last4_values=args.last4_values)
    world = build_world(rng, args.cards, args.purchases, args.merchants, noise, args.days)
    print(f"noise: {noise}")
    box = SecretBox(services.settings.resolved_secret_key)
    with services.db.session() as session:
        issuers = [
            create_partner(
                session, box, name=f"Bank {i}", roles=[PartnerRole.CARD_ISSUER], now=clock.now()
            )
            for i in range(3)
        ]
        merchant = create_partner(
            session, box, name="PSP", roles=[PartnerRole.MERCHANT], now=clock.now()
        )
    enrol_cards(services, world, [i.partner.id for i in issuers])
    print(
        f"world: {len(world.cards):,} cards, {len(world.merchants)} merchants, "
        f"{len(world.purchases):,} purchases ({time.perf_counter() - started:.1f} s to build)"
    )
    events = events_of(rng, world)
    skews = {
        id(p): timedelta(seconds=rng.uniform(-90, 90))
        for pu in world.purchases
        for p in pu.payments
    }
    receipt_of: dict[str, Purchase] = {}
    latencies: dict[str, list[float]] = {"receipt": [], "auth": [], "clearing": []}
    merchant_headers = {"Authorization": f"Token {merchant.api_key}"}
    issuer_headers = [{"Authorization": f"Token {i.api_key}"} for i in issuers]
    next_settle = DAY
    posting = time.perf_counter()
    with httpx.Client(base_url=url, timeout=60) as client:
        for number, event in enumerate(events):
            clock.set(event.at)
            if event.at >= next_settle:
                settle_due_matches(services)
                next_settle = event.at + timedelta(seconds=30)
            t0 = time.perf_counter()
            if event.kind == "receipt":
                answer = client.post(
                    "/api/v1/receipts/",
                    json=receipt_body(event.purchase, number),
                    headers=merchant_headers,
                )
                assert answer.status_code == 200, answer.text
                receipt_of[answer.json()["receipt_id"]] = event.purchase
                settle_due_matches(services, expire=False)  # the worker, woken by the commit
            else:
                assert event.payment is not None
                body = transaction_body(rng, world, event, skews[id(event.payment)])
                issuer = event.payment.shopper.issuer
                answer = client.post(
                    "/api/v1/card-transactions/", json=body, headers=issuer_headers[issuer]
                )
                assert answer.status_code == 200, answer.text
            latencies[event.kind].append((time.perf_counter() - t0) * 1000)
    clock.set(max(e.at for e in events) + timedelta(days=8))
    while settle_due_matches(services):
        pass
    elapsed = time.perf_counter() - posting
    report(services, world, receipt_of, latencies, elapsed, len(events))


def report(
    services: Services,
    world: World,
    receipt_of: dict[str, Purchase],
    latencies: dict[str, list[float]],
    elapsed: float,
    n_events: int,
) -> None:
    card_index = {card_id: i for i, card_id in enumerate(world.card_ids)}
    with services.db.session(write=False) as session:
        matches = session.execute(
            select(CardMatch.receipt_id, CardPaymentRecord.payment_index, CardMatch.card_id).join(
                CardPaymentRecord, CardPaymentRecord.id == CardMatch.payment_id
            )
        ).all()
    matched: dict[tuple[str, int], int | None] = {
        (str(r), i): card_index.get(c) for r, i, c in matches
    }
    total = matchable = correct = wrong = unenrolled_payments = 0
    wrong_matches: list[tuple[str, int, Payment, int | None]] = []
    # category: payments, matchable, correct, wrong
    by_category = {name: [0, 0, 0, 0] for name in CATEGORIES}
    for receipt_id, purchase in receipt_of.items():
        for index, payment in enumerate(purchase.payments):
            total += 1
            tally_of = by_category[payment.category]
            tally_of[0] += 1
            truth = payment.shopper.card_index
            got = matched.get((receipt_id, index), -1)
            if truth is None:
                unenrolled_payments += 1
            elif not payment.lost:
                matchable += 1
                tally_of[1] += 1
            if got == -1:
                continue
            if got == truth:
                correct += 1
                tally_of[2] += 1
            else:
                wrong += 1
                tally_of[3] += 1
                wrong_matches.append((receipt_id, index, payment, got))
    with services.db.session(write=False) as session:
        reasons = session.execute(select(CardPaymentRecord.status, CardPaymentRecord.reason)).all()
        # Every wrong match with the decision kuitti recorded, so a regression can be traced.
        for receipt_id, index, payment, got in wrong_matches:
            print(
                f"WRONG: receipt {receipt_id} payment {index} ({payment.category}, paid "
                f"{payment.paid_at.isoformat()}, amount {payment.amount}, code shown "
                f"{payment.show_code}, last4 only {payment.last4_only}) belongs to card "
                f"#{payment.shopper.card_index}, went to #{got}"
            )
            explained = explain_receipt(session, uuid.UUID(receipt_id), services.clock.now())
            print(json.dumps(explained, indent=2, default=str))
    tally: dict[str, int] = {}
    for status, reason in reasons:
        if status == "matched":
            continue
        last = reason.get("last_reason", reason) if status == "expired" else reason
        why = f"{status}/{last.get('why', '?')}"
        tally[why] = tally.get(why, 0) + 1
    waits = {
        sample.labels["why"]: int(sample.value)
        for metric in CARD_MATCH_WAITS.collect()
        for sample in metric.samples
        if sample.name.endswith("_total")
    }
    precision = 100.0 * correct / (correct + wrong) if correct + wrong else 100.0
    recall = 100.0 * correct / matchable if matchable else 100.0
    print(
        f"receipt card payments: {total:,} ({unenrolled_payments:,} by cards nobody enrolled, "
        f"{matchable:,} matchable)"
    )
    print(f"matches: {correct + wrong:,}   wrong: {wrong}")
    print(
        "unmatched payments by last decision: "
        + ", ".join(f"{k} {v:,}" for k, v in sorted(tally.items()))
    )
    print(
        "decisions that left a payment waiting (transient): "
        + ", ".join(f"{k} {v:,}" for k, v in sorted(waits.items()))
    )
    print(f"precision: {precision:.2f} %   recall (matchable): {recall:.2f} %")
    print("  category             payments  matchable  matched  wrong  precision    recall")
    for name, (n, can, right, bad) in by_category.items():
        cat_precision = f"{100.0 * right / (right + bad):8.2f} %" if right + bad else "       – "
        cat_recall = f"{100.0 * right / can:8.2f} %" if can else "       – "
        print(
            f"  {name:<20} {n:>8,} {can:>10,} {right + bad:>8,} {bad:>6} "
            f"{cat_precision} {cat_recall}"
        )
    print(
        f"requests: {n_events:,} in {elapsed:.1f} s   ({n_events / elapsed:.0f} req/s, "
        f"{(correct + wrong) / elapsed:.0f} matches/s)"
    )
    for kind, values in latencies.items():
        if values:
            p50, p99 = statistics.median(values), percentile(values, 0.99)
            print(f"  HTTP POST {kind:<8} p50 {p50:6.1f} ms   p99 {p99:6.1f} ms")
    for trigger in ("worker", "transaction"):
        count, mean, p99_bound = matching_stats(trigger, {})
        if count:
            print(
                f"  matching on {trigger:<11} {count:>6,} runs   mean {mean * 1000:6.2f} ms   "
                f"p99 ≤ {p99_bound * 1000:5.1f} ms (histogram bucket)"
            )


def histogram_snapshot(trigger: str) -> dict[str, float]:
    """The matching-time histogram's cumulative buckets, sum and count for one trigger."""
    values: dict[str, float] = {}
    for metric in CARD_MATCHING_SECONDS.collect():
        for sample in metric.samples:
            if sample.labels.get("trigger") != trigger:
                continue
            if sample.name.endswith("_bucket"):
                values[f"le:{sample.labels['le']}"] = sample.value
            elif sample.name.endswith("_sum"):
                values["sum"] = sample.value
            elif sample.name.endswith("_count"):
                values["count"] = sample.value
    return values


def matching_stats(trigger: str, before: dict[str, float]) -> tuple[int, float, float]:
    """Runs, mean seconds and the bucket bound under which 99 % fell, since ``before``."""
    after = histogram_snapshot(trigger)
    count = after.get("count", 0.0) - before.get("count", 0.0)
    if count <= 0:
        return 0, 0.0, 0.0
    mean = (after.get("sum", 0.0) - before.get("sum", 0.0)) / count
    bound = float("inf")
    for key in sorted((k for k in after if k.startswith("le:")), key=lambda k: float(k[3:])):
        if after[key] - before.get(key, 0.0) >= 0.99 * count:
            bound = float(key[3:])
            break
    return int(count), mean, bound


# -- pilot receipts in real time ---------------------------------------------------------------


class Arrivals(BaseHTTPRequestHandler):
    """A pilot bank's webhook receiver: notes when each receipt's notification arrived."""

    seen: ClassVar[dict[str, float]] = {}
    changed = threading.Condition()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        arrived = time.perf_counter()
        self.send_response(200)
        self.end_headers()
        receipt_id = json.loads(body).get("receipt_id")
        with self.changed:
            self.seen[receipt_id] = arrived
            self.changed.notify_all()

    def log_message(self, format: str, *args: object) -> None:
        pass


def run_pilot(args: argparse.Namespace, services: Services, clock: FrozenClock, url: str) -> None:
    """``args.pilot`` pilot receipts, each timed from the POST's answer to its webhook."""
    now = datetime.now(UTC).replace(microsecond=0)
    clock.set(now)  # a worker process keeps the real time
    receiver = ThreadingHTTPServer(("127.0.0.1", 0), Arrivals)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    box = SecretBox(services.settings.resolved_secret_key)
    with services.db.session() as session:
        bank = create_partner(
            session,
            box,
            name="Pilot Bank",
            roles=[PartnerRole.BANK_PILOT],
            now=now,
            webhook_url=f"http://127.0.0.1:{receiver.server_port}/hook",
            allow_insecure_webhooks=True,
        )
        merchant = create_partner(
            session, box, name="Pilot PSP", roles=[PartnerRole.MERCHANT], now=now
        )
        for n in range(args.pilot):
            request = check_card_request(f"pilot-{n}", f"601100******{n:04d}", "2029-12", None)
            enroll_card(session, bank.partner, request, now=now, pilot=True)
    worker = start_worker(args, services)
    answer_ms: list[float] = []
    latency_ms: list[float] = []
    try:
        with httpx.Client(base_url=url, timeout=60) as client:
            for n in range(args.pilot):
                shopper = Shopper("601100", f"{n:04d}", None, 0)
                payment = Payment(shopper, 500 + n, now, code(random.Random(n)), "0")
                payment.show_code = payment.show_reference = False
                body = receipt_body(
                    Purchase(Merchant("Pilot", "MIDPILOT", "grocer", 1), [payment]), n
                )
                t0 = time.perf_counter()
                answer = client.post(
                    "/api/v1/receipts/",
                    json=body,
                    headers={"Authorization": f"Token {merchant.api_key}"},
                )
                answered = time.perf_counter()
                assert answer.status_code == 200, answer.text
                receipt_id = answer.json()["receipt_id"]
                with Arrivals.changed:
                    arrived = Arrivals.changed.wait_for(
                        partial(operator.contains, Arrivals.seen, receipt_id), timeout=60
                    )
                assert arrived, f"no full_receipt_notification for receipt {n} within 60 s"
                answer_ms.append((answered - t0) * 1000)
                latency_ms.append((Arrivals.seen[receipt_id] - answered) * 1000)
    finally:
        worker()
        receiver.shutdown()
    slow = [f"#{n}: {ms / 1000:.1f} s" for n, ms in enumerate(latency_ms) if ms > 1000]
    where = "a kuitti worker process" if args.worker_process else "the worker in this process"
    print(f"pilot receipts: {args.pilot}, matched and sent by {where}")
    print(
        f"  POST /api/v1/receipts/ answer   p50 {statistics.median(answer_ms):7.1f} ms   "
        f"p99 {percentile(answer_ms, 0.99):7.1f} ms"
    )
    print(
        f"  answer → bank's webhook         p50 {statistics.median(latency_ms):7.1f} ms   "
        f"p99 {percentile(latency_ms, 0.99):7.1f} ms   max {max(latency_ms):7.1f} ms"
    )
    print(f"  over a second: {len(slow)} ({', '.join(slow) or 'none'})")
    count, mean, p99_bound = matching_stats("worker", {})
    print(
        f"  matching steps: {count:,}, mean {mean * 1000:.2f} ms, p99 ≤ {p99_bound * 1000:.1f} ms"
    )


def start_worker(args: argparse.Namespace, services: Services) -> Callable[[], None]:
    """The worker (webhooks, mail, matching) in a thread of this process, or as a ``kuitti
    worker`` process; returns the function that stops it."""
    if args.worker_process:
        env = dict(
            os.environ,
            KUITTI_DATABASE_URL=services.settings.resolved_database_url,
            KUITTI_SECRET_KEY=services.settings.resolved_secret_key,
            KUITTI_VAR_DIR=str(services.settings.var_dir),
            KUITTI_WEBHOOK_ALLOW_INSECURE="true",
            KUITTI_LOG_LEVEL="WARNING",
        )
        process = subprocess.Popen([str(ROOT / ".venv/bin/kuitti"), "worker"], env=env)
        # Start timing once it listens: a loaded machine takes many seconds to import it.
        listening = text("SELECT count(*) FROM pg_stat_activity WHERE query = :q")
        deadline = time.monotonic() + 180
        while True:
            with services.db.session(write=False) as session:
                query = f"LISTEN {MATCHING.channel}"
                if session.scalar(listening, {"q": query}):
                    break
            assert process.poll() is None, "the worker process ended"
            assert time.monotonic() < deadline, "the worker process did not start listening"
            time.sleep(0.1)  # polling a starting process, not timing a result

        def stop_process() -> None:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=30)

        return stop_process
    stop_event = threading.Event()
    loop_ready = threading.Event()
    state: dict[str, Any] = {}

    def run() -> None:
        async def main() -> None:
            state["loop"], state["stop"] = asyncio.get_running_loop(), asyncio.Event()
            loop_ready.set()
            await run_worker(services, state["stop"])

        asyncio.run(main())
        stop_event.set()

    threading.Thread(target=run, daemon=True).start()
    loop_ready.wait(10)

    def stop_thread() -> None:
        state["loop"].call_soon_threadsafe(state["stop"].set)
        stop_event.wait(30)

    return stop_thread


# -- cost per receipt at 10k vs 1M stored transactions -----------------------------------------


def run_scale(args: argparse.Namespace, services: Services, clock: FrozenClock, url: str) -> None:
    """Bulk-insert transactions (and waiting payments) straight into the tables — posting a
    million over HTTP would take an hour — then post receipts over HTTP and time them."""
    rng = random.Random(args.seed + 1)
    box = SecretBox(services.settings.resolved_secret_key)
    now = DAY + timedelta(days=6)
    clock.set(now)
    with services.db.session() as session:
        issuer = create_partner(
            session, box, name="Scale Bank", roles=[PartnerRole.CARD_ISSUER], now=now
        )
        merchant = create_partner(
            session, box, name="Scale PSP", roles=[PartnerRole.MERCHANT], now=now
        )
        card_ids = session.scalars(select(Card.id).limit(20000)).all()
        cards = {c.id: c for c in session.scalars(select(Card).where(Card.id.in_(card_ids[:2000])))}
    del issuer
    card_list = list(cards.values())
    stored = 0
    print("cost of matching one receipt (HTTP POST of a receipt whose transaction is stored):")
    for target in args.scale_points:
        _bulk_transactions(services, rng, card_list, target - stored, now)
        stored = target
        timings = []
        before = histogram_snapshot("receipt")
        with httpx.Client(base_url=url, timeout=60) as client:
            for n in range(args.scale_receipts):
                card = rng.choice(card_list)
                paid_at = now - timedelta(minutes=rng.uniform(0, 600))
                code_ = f"S{stored}-{n}"
                amount = rng.randint(100, 50000)
                with services.db.session() as session:
                    purchase = CardPurchase(
                        id=uuid.uuid4(),
                        card_id=card.id,
                        merchant_id="MIDSCALE",
                        merchant_name="Scale",
                        authorization_code=code_,
                        reference_number=None,
                        created_at=now,
                    )
                    session.add(purchase)
                    session.flush()
                    session.add(
                        CardTransaction(
                            id=uuid.uuid4(),
                            card_id=card.id,
                            purchase_id=purchase.id,
                            transaction_type="auth",
                            amount=amount,
                            currency="EUR",
                            occurred_at=paid_at,
                            merchant_id="MIDSCALE",
                            merchant_name="Scale",
                            reference_number=None,
                            authorization_code=code_,
                            pan_last4=card.pan_last4,
                            created_at=now,
                        )
                    )
                purchase_doc = Purchase(
                    Merchant("Scale", "MIDSCALE", "grocer", 1),
                    [
                        Payment(
                            Shopper(card.pan_first6, card.pan_last4, 0, 0),
                            amount,
                            paid_at,
                            code_,
                            "0",
                        )
                    ],
                )
                body = receipt_body(purchase_doc, n)
                body["payments"][0]["attributes"]["authorizationCode"] = code_
                t0 = time.perf_counter()
                answer = client.post(
                    "/api/v1/receipts/",
                    json=body,
                    headers={"Authorization": f"Token {merchant.api_key}"},
                )
                timings.append((time.perf_counter() - t0) * 1000)
                assert answer.status_code == 200, answer.text
        with services.db.session(write=False) as session:
            count = session.scalar(text("SELECT count(*) FROM card_transactions"))
            waiting = session.scalar(text("SELECT count(*) FROM card_payments"))
        runs, mean, p99_bound = matching_stats("receipt", before)
        p50, p99 = statistics.median(timings), percentile(timings, 0.99)
        print(
            f"  {count:>10,} transactions, {waiting:>7,} stored payments: matching mean "
            f"{mean * 1000:5.2f} ms, p99 ≤ {p99_bound * 1000:4.1f} ms ({runs} receipts); "
            f"whole POST p50 {p50:5.1f} ms, p99 {p99:5.1f} ms"
        )
    if services.db.dialect == "sqlite":
        with services.db.session(write=False) as session:
            plan = session.execute(
                text(
                    "EXPLAIN QUERY PLAN SELECT * FROM card_transactions WHERE merchant_id='M' "
                    "AND amount=1 AND pan_last4='1234' AND occurred_at >= '2026-01-01' "
                    "AND occurred_at <= '2026-01-02'"
                )
            ).all()
        print("  query plan of the candidate lookup:", "; ".join(str(r[-1]) for r in plan))


def _bulk_transactions(
    services: Services, rng: random.Random, cards: list[Card], count: int, now: datetime
) -> None:
    """``count`` transactions (auths and clearings, each its own purchase) over the last seven
    days at 5,000 merchant ids."""
    batch = 20000
    done = 0
    while done < count:
        size = min(batch, count - done)
        purchases, txns = [], []
        for _ in range(size):
            card = rng.choice(cards)
            pid = uuid.uuid4()
            mid = f"MIDB{rng.randrange(5000):05d}"
            at = now - timedelta(seconds=rng.uniform(0, 7 * 86400))
            amount = rng.randint(100, 50000)
            purchases.append(
                {
                    "id": pid,
                    "card_id": card.id,
                    "merchant_id": mid,
                    "merchant_name": "B",
                    "authorization_code": None,
                    "reference_number": None,
                    "payment_id": None,
                    "created_at": now,
                }
            )
            txns.append(
                {
                    "id": uuid.uuid4(),
                    "card_id": card.id,
                    "purchase_id": pid,
                    "transaction_type": rng.choice(("auth", "clearing")),
                    "amount": amount,
                    "currency": "EUR",
                    "occurred_at": at,
                    "merchant_id": mid,
                    "merchant_name": "B",
                    "reference_number": None,
                    "authorization_code": None,
                    "pan_last4": card.pan_last4,
                    "created_at": now,
                }
            )
        with services.db.session() as session:
            session.execute(insert(CardPurchase), purchases)
            session.execute(insert(CardTransaction), txns)
        done += size


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="10,000 cards, 1,500 purchases")
    parser.add_argument("--cards", type=int, default=100_000)
    parser.add_argument("--purchases", type=int, default=12_000)
    parser.add_argument("--merchants", type=int, default=400)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--days", type=int, default=4, help="days of purchases")
    parser.add_argument("--database", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument(
        "--harsh",
        action="store_true",
        help="60 %% of receipts without codes, 60 %% last four only, "
        "40 %% of issuer transactions without codes",
    )
    parser.add_argument(
        "--last4-values",
        type=int,
        default=0,
        help="draw last four digits from this many values (stress: e.g. 20 makes masked PANs "
        "collide constantly)",
    )
    parser.add_argument("--scale", action="store_true", help="also measure 10k vs 1M transactions")
    parser.add_argument(
        "--pilot", type=int, default=0, help="only: N pilot receipts timed to the bank's webhook"
    )
    parser.add_argument(
        "--worker-process", action="store_true", help="with --pilot: a separate worker process"
    )
    parser.add_argument("--scale-receipts", type=int, default=300)
    args = parser.parse_args()
    if args.worker_process and args.database != "postgresql":
        parser.error("--worker-process needs --database postgresql (SQLite has no NOTIFY)")
    if args.quick:
        args.cards, args.purchases, args.merchants = 10_000, 1_500, 80
        args.scale_points = [10_000, 100_000]
    else:
        args.scale_points = [10_000, 1_000_000]
    clock = FrozenClock(DAY)
    with tempfile.TemporaryDirectory() as tmp:
        services, pg_name = make_services(args.database, Path(tmp), clock)
        try:
            with Server(services) as server:
                print(f"database: {services.db.dialect}")
                if args.pilot:
                    run_pilot(args, services, clock, server.url)
                    return
                run_world(args, services, clock, server.url)
                if args.scale:
                    run_scale(args, services, clock, server.url)
        finally:
            services.db.dispose()
            if pg_name is not None:
                with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
                    admin.execute(f'DROP DATABASE IF EXISTS "{pg_name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
