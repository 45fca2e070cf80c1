"""Monthly partitions (``kuitti.partitions``, PostgreSQL) and receipt retention
(``kuitti.retention``, both databases): a post never fails for lack of a partition, uniqueness
holds across months, a month past retention is dropped whole with nothing left pointing at it,
and the receipts of other months and of longer-retention partners stay."""

from __future__ import annotations

import types
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select, text
from sqlalchemy.exc import IntegrityError

from kuitti.clock import FrozenClock
from kuitti.housekeeping import delete_expired
from kuitti.models import (
    CardPaymentRecord,
    CardPurchase,
    Partner,
    Receipt,
    ReceiptGrant,
    ReceiptLink,
)
from kuitti.months import Month
from kuitti.partitions import (
    ensure_month_partitions,
    is_partitioned,
    partitions,
)
from kuitti.partners.service import NewPartner
from kuitti.retention import drop_month
from kuitti.services import Services
from tests.cards.support import AUTH_CODE, make_world
from tests.factories import auth, make_partner, receipt_doc, token_body
from tests.test_cli import run, run_json
from tests.test_partition_migration import keys_to_receipts

LIST = "/api/v1/receipts/"
postgres_only = pytest.mark.postgres_only


@pytest.fixture
def id_clock(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Sets the moment new ids carry (``kuitti.ids`` reads the system clock): the month a
    row is ingested in, which picks its partition."""

    def at(moment: datetime) -> None:
        nanoseconds = int(moment.timestamp() * 1_000_000_000)
        monkeypatch.setattr("kuitti.ids.time", types.SimpleNamespace(time_ns=lambda: nanoseconds))

    return at


def post(
    client: httpx.Client, merchant: NewPartner, when: datetime, *tokens: dict[str, Any]
) -> httpx.Response:
    doc = receipt_doc(receiptNumber=f"R-{uuid.uuid4().hex[:8]}", receiptTimeStamp=when.isoformat())
    body = token_body(doc, *tokens) if tokens else doc
    return client.post(LIST, json=body, headers=auth(merchant.api_key))


def posted(client: httpx.Client, merchant: NewPartner, when: datetime) -> str:
    answer = post(client, merchant, when)
    assert answer.status_code == 200, answer.text
    return str(answer.json()["receipt_id"])


def partition_of(services: Services, receipt_id: str) -> str:
    with services.db.session(write=False) as session:
        return str(
            session.execute(
                text("SELECT tableoid::regclass::text FROM receipts WHERE id = :id"),
                {"id": uuid.UUID(receipt_id)},
            ).scalar_one()
        )


def count(services: Services, model: type[object]) -> int:
    with services.db.session(write=False) as session:
        return int(session.scalar(select(func.count()).select_from(model)) or 0)


def set_retention(services: Services, partner: NewPartner, days: int | None) -> None:
    with services.db.session() as session:
        row = session.get(Partner, partner.partner.id)
        assert row is not None
        row.retention_days = days


def readable(client: httpx.Client, merchant: NewPartner, receipt_id: str) -> int:
    path = f"{LIST}{receipt_id}/service_json/"
    return client.get(path, headers=auth(merchant.api_key)).status_code


@postgres_only
def test_the_migrated_database_is_partitioned_with_months_ahead(services: Services) -> None:
    with services.db.session(write=False) as session:
        assert is_partitioned(session)
        names = [p.name for p in partitions(session, "receipts")]
    assert names[0] == "receipts_legacy"
    assert names[-1] == "receipts_default"
    assert len([n for n in names if n.startswith("receipts_p")]) == 4


@postgres_only
def test_a_post_into_a_month_without_a_partition_is_stored_in_the_default(
    client: httpx.Client, services: Services, id_clock: Any
) -> None:
    merchant = make_partner(services)
    month = datetime(2031, 5, 10, tzinfo=UTC)
    id_clock(month)
    receipt_id = posted(client, merchant, month)
    assert partition_of(services, receipt_id) == "receipts_default"
    assert readable(client, merchant, receipt_id) == 200
    with services.db.session() as session:
        made = ensure_month_partitions(session, Month(2031, 5))
    # Its rows are in the default: that month gets no partition of receipts (PostgreSQL would
    # refuse it), and the next post of the month still goes in.
    assert "receipts_p203105" not in made
    assert partition_of(services, posted(client, merchant, month)) == "receipts_default"


@postgres_only
def test_a_receipt_id_is_unique_in_its_namespace_across_months(
    client: httpx.Client, services: Services, id_clock: Any
) -> None:
    merchant = make_partner(services, namespaces=["kauppa"])
    token = {"type": "RECEIPT_ID", "namespace": "kauppa", "value": "till-1-0001"}
    with services.db.session() as session:
        ensure_month_partitions(session, Month(2027, 1))
        ensure_month_partitions(session, Month(2027, 2))
    id_clock(datetime(2027, 1, 20, tzinfo=UTC))
    first = post(client, merchant, datetime(2027, 1, 20, tzinfo=UTC), token)
    assert first.status_code == 200, first.text
    assert partition_of(services, first.json()["receipt_id"]) == "receipts_p202701"
    id_clock(datetime(2027, 2, 20, tzinfo=UTC))
    second = post(client, merchant, datetime(2027, 2, 20, tzinfo=UTC), token)
    assert second.status_code == 400
    assert second.json()["error"] == "duplicate_receipt_id"
    assert count(services, Receipt) == 1


@postgres_only
def test_a_months_card_payments_go_with_its_receipts_and_free_their_purchases(
    client: httpx.Client, services: Services, clock: FrozenClock, id_clock: Any
) -> None:
    """A month's card payments are in its partition, which refers to the month's receipts;
    dropping the month detaches both, deletes its matches and frees the purchases they took."""
    world = make_world(services, client, clock)
    with services.db.session() as session:
        ensure_month_partitions(session, Month(2027, 1))
    world.enroll()
    world.transaction(authorization_code=AUTH_CODE)
    id_clock(datetime(2027, 1, 10, tzinfo=UTC))
    receipt_id = world.receipt()
    assert world.matched_card(receipt_id) is not None
    with services.db.session(write=False) as session:
        where = session.execute(
            text("SELECT tableoid::regclass::text FROM card_payments WHERE receipt_id = :r"),
            {"r": uuid.UUID(receipt_id)},
        ).scalar_one()
        [month] = [p for p in partitions(session, "receipts") if p.month == Month(2027, 1)]
    assert where == "card_payments_p202701"
    # (receipt_id, payment_index) stays unique in the partitioned table.
    with pytest.raises(IntegrityError), services.db.session() as session:
        session.execute(
            text(
                "INSERT INTO card_payments SELECT gen_random_uuid(), receipt_id, payment_index,"
                " status, merchant_id, amount, pre_authorized_amount, currency, paid_at,"
                " masked_pan, pan_last4, authorization_code, reference_number, settle_at, reason,"
                " sandbox, created_at, updated_at FROM card_payments"
            )
        )

    with services.db.session() as session:
        steps = [what for what, _seconds in drop_month(session, month)]

    assert [step for step in steps if step.startswith(("detach", "delete from"))] == [
        "detach receipt_deliveries_p202701",
        "detach receipt_grants_p202701",
        "detach card_payments_p202701",
        "detach receipts_p202701",
    ]
    assert world.matches() == []
    assert count(services, CardPaymentRecord) == 0
    with services.db.session(write=False) as session:
        assert list(session.scalars(select(CardPurchase.payment_id))) == [None]


@postgres_only
def test_a_grant_made_months_later_is_in_its_receipts_month_and_goes_with_it(
    client: httpx.Client, services: Services, id_clock: Any
) -> None:
    """Grants are partitioned by their receipt (migration 0012): one made in February for a
    January receipt is in January's partition, whose key refers to January's receipts (none on
    the parent: a detach of receipts checks no grants), and a drop of January takes it whole."""
    merchant = make_partner(services)
    app = make_partner(services, name="Sovellus Oy")
    with services.db.session() as session:
        ensure_month_partitions(session, Month(2027, 1))
        ensure_month_partitions(session, Month(2027, 2))
    id_clock(datetime(2027, 1, 10, tzinfo=UTC))
    receipt_id = uuid.UUID(posted(client, merchant, datetime(2027, 1, 10, tzinfo=UTC)))
    id_clock(datetime(2027, 2, 10, tzinfo=UTC))
    with services.db.session() as session:
        receipt = session.get(Receipt, receipt_id)
        assert receipt is not None
        later = ReceiptGrant(
            partner_id=app.partner.id,
            receipt_id=receipt_id,
            receipt_time=receipt.receipt_time,
            reason="connection",
        )
        session.add(later)
        session.flush()
        later_id = later.id
    assert Month.of_id(later_id) == Month(2027, 2)
    with services.db.session(write=False) as session:
        where = set(
            session.execute(
                text("SELECT tableoid::regclass::text FROM receipt_grants WHERE receipt_id = :r"),
                {"r": receipt_id},
            ).scalars()
        )
        keys = keys_to_receipts(session, "receipt_grants")
        [month] = [p for p in partitions(session, "receipts") if p.month == Month(2027, 1)]
    assert where == {"receipt_grants_p202701"}
    assert keys["receipt_grants_p202701"] == "receipts_p202701"
    assert "receipt_grants" not in keys

    with services.db.session() as session:
        steps = [what for what, _seconds in drop_month(session, month)]

    assert "detach receipt_grants_p202701" in steps
    assert not [step for step in steps if "receipt_grants" in step and "p202701" not in step]
    assert count(services, ReceiptGrant) == 0
    assert count(services, Receipt) == 0


@postgres_only
def test_retention_drops_an_expired_month_and_keeps_the_rest(
    client: httpx.Client, services: Services, clock: FrozenClock, id_clock: Any
) -> None:
    short = make_partner(services, name="Lyhyt Oy", namespaces=["lyhyt"])
    long = make_partner(services, name="Pitka Oy")
    set_retention(services, short, 30)
    set_retention(services, long, 3650)
    with services.db.session() as session:
        for number in (1, 2, 3):
            ensure_month_partitions(session, Month(2027, number))
    receipts: dict[str, list[str]] = {"jan": [], "feb": [], "feb_long": [], "mar": []}
    for key, month, merchant in (
        ("jan", 1, short),
        ("feb", 2, short),
        ("feb_long", 2, long),
        ("mar", 3, short),
    ):
        when = datetime(2027, month, 10, tzinfo=UTC)
        id_clock(when)
        clock.set(when)
        for number in range(3):
            token = {"type": "RECEIPT_ID", "namespace": "lyhyt", "value": f"{key}-{number}"}
            tokens = [token] if merchant is short else []
            answer = post(client, merchant, when, *tokens)
            assert answer.status_code == 200, answer.text
            receipts[key].append(answer.json()["receipt_id"])
    # A back-dated receipt in March for a receipt time that is not yet past its 30 days.
    id_clock(datetime(2027, 3, 20, tzinfo=UTC))
    recent = posted(client, short, datetime(2027, 5, 1, tzinfo=UTC))
    clock.set(datetime(2027, 5, 15, tzinfo=UTC))

    deleted = delete_expired(services)

    with services.db.session(write=False) as session:
        names = {p.name for p in partitions(session, "receipts")}
    assert "receipts_p202701" not in names  # dropped whole
    assert {"receipts_p202702", "receipts_p202703"} <= names  # held by a longer retention
    assert deleted["receipt_months"] >= 1  # January, and any earlier month left empty
    # The held month was read once: its newest receipt time per partner is kept with it.
    with services.db.session(write=False) as session:
        noted = session.execute(
            text("SELECT obj_description('receipts_p202702'::regclass, 'pg_class')")
        ).scalar_one()
    assert str(long.partner.id) in noted
    assert deleted["receipts"] == 3 + 3  # February's and March's of the short partner
    assert all(readable(client, long, r) == 200 for r in receipts["feb_long"])
    assert readable(client, short, recent) == 200
    for key in ("jan", "feb", "mar"):
        assert all(readable(client, short, r) == 404 for r in receipts[key])
    # Nothing left that points at a removed receipt.
    assert count(services, Receipt) == 4
    assert count(services, ReceiptLink) == 0
    assert count(services, ReceiptGrant) == 4
    assert count(services, CardPaymentRecord) == 4


def test_retention_deletes_receipts_past_their_partners_retention(
    client: httpx.Client, services: Services, clock: FrozenClock
) -> None:
    """Both databases: in batches, through the grants' listing index; a partner's own longer
    retention and the default (unset: kept) both hold."""
    default = make_partner(services, name="Oletus Oy", namespaces=["oletus"])
    short = make_partner(services, name="Lyhyt Oy")
    long = make_partner(services, name="Pitka Oy")
    set_retention(services, short, 30)
    set_retention(services, long, 400)
    old, new = clock.now() - timedelta(days=100), clock.now() - timedelta(days=10)
    token = {"type": "RECEIPT_ID", "namespace": "oletus", "value": "old-1"}
    kept_by_default = post(client, default, old, token).json()["receipt_id"]
    gone = [posted(client, short, old) for _ in range(3)]
    kept = [posted(client, short, new), posted(client, long, old)]

    assert delete_expired(services)["receipts"] == 3
    assert all(readable(client, short, r) == 404 for r in gone)
    assert readable(client, short, kept[0]) == 200
    assert readable(client, long, kept[1]) == 200
    assert readable(client, default, kept_by_default) == 200

    settings = services.settings.model_copy(update={"receipt_retention_days": 50})
    fifty_days = Services(settings=settings, db=services.db, clock=services.clock)
    assert delete_expired(fifty_days)["receipts"] == 1
    assert readable(client, default, kept_by_default) == 404
    assert count(services, ReceiptLink) == 0
    assert count(services, Receipt) == 2


def test_a_partners_retention_is_set_and_cleared_on_the_command_line(services: Services) -> None:
    merchant = make_partner(services)
    pid = str(merchant.partner.id)
    assert (
        run_json(services, "partner", "update", pid, "--retention-days", "3650")["retention_days"]
        == 3650
    )
    with services.db.session(write=False) as session:
        assert session.get(Partner, merchant.partner.id).retention_days == 3650  # type: ignore[union-attr]
    assert (
        run_json(services, "partner", "update", pid, "--retention-days", "0")["retention_days"]
        is None
    )


def test_db_partitions_lists_them_or_says_sqlite_has_none(services: Services) -> None:
    if services.db.is_sqlite:
        result = run(services, "db", "partitions")
        assert result.exit_code == 2
        assert "SQLite keeps plain tables" in result.output
        return
    data = run_json(services, "db", "partitions", "--ahead", "1")
    names = [p["name"] for p in data["partitions"]["receipts"]]
    assert names[-1] == "receipts_default"
    assert set(data["partitions"]) == {
        "receipts",
        "receipt_grants",
        "receipt_deliveries",
        "card_payments",
    }
    # Each month's payments and deliveries refer to that month's receipts, the default to all.
    for table in ("card_payments", "receipt_deliveries"):
        for listed in data["partitions"][table]:
            if listed["month"] is not None:
                assert listed["refers_to"] == listed["name"].replace(table, "receipts")
        assert data["partitions"][table][-1]["refers_to"] == "receipts"
