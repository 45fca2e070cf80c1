"""``bench/day.py``'s plan, without a server: the day it offers follows its curve, card
transactions go with the enrolled cards' receipts only, and every receipt post it builds is one
kuitti accepts, in the form its kind names."""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest

from kuitti.receipts.validation import parse_receipt_request

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.fixture
def day(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(BENCH)
    import day  # bench/day.py

    return sys.modules[day.__name__]


def test_the_day_follows_its_curve_and_posts_what_kuitti_takes(day: ModuleType) -> None:
    world = day.World(
        [(f"key-{i}", f"day{i}") for i in range(3)],
        "app-key",
        "issuer-key",
        [(f"user{i}@example.com", {}) for i in range(4)],
        [i % 4 for i in range(6)],
        2,
    )
    plan = day.Plan(argparse.Namespace(seed=7, peak=40.0), world, 1.5)
    load = day.Load(plan, world, "http://127.0.0.1:9", 8)
    load.wall_start = time.time()
    dues = list(iter(plan.pop, None))

    assert [d.at for d in dues] == sorted(d.at for d in dues)
    posts = [d for d in dues if d.what == "post"]
    per_hour = Counter(d.hour for d in posts)
    assert [per_hour[h] for h in range(24)] == [round(plan.rate(h) * 1.5) for h in range(24)]
    assert max(plan.rate(h) for h in range(24)) == 40.0
    transactions = {id(d.purchase): d for d in dues if d.what == "transaction"}
    kinds = Counter(d.purchase.kind for d in posts)
    assert set(kinds) == {kind for kind, _ in day.POST_MIX}
    for post in posts:
        purchase = post.purchase
        assert (id(purchase) in transactions) == (purchase.payer == "enrolled")
        if id(purchase) in transactions:
            assert abs(transactions[id(purchase)].at - post.at) <= day.TRANSACTION_SKEW_SECONDS
        body, headers = load.post(post)
        request = parse_receipt_request(body, attachments_enabled=False)
        token = day.TOKENS[purchase.kind]
        assert [t.type for t in request.tokens] == ([token["type"]] if token else [])
        assert ("Idempotency-Key" in headers) == (purchase.kind == "Idempotency-Key")
        payment = request.document["payments"][0]
        assert payment["amount"] == purchase.template.amount
        assert payment["attributes"]["authorizationCode"] == purchase.code
        if purchase.kind == "CARD":
            assert purchase.payer == "enrolled"
            assert request.tokens[0].value == payment["attributes"]["maskedPAN"]
