"""A month archived, deleted and restored reads exactly as before, on both databases.

The month is made through the real API: a card purchase matched to its holder's card (the
delivery, the issuer's card grant, the app's connection grant, the card match), a receipt
with a RECEIPT_ID link that the holder claimed, a return linked to its purchase. A receipt of
the next month stays throughout. The month is exported with ``kuitti archive export``,
deleted with the receipts' one deletion (``kuitti.retention.delete_receipts``), and
restored with ``kuitti archive restore``: every receipt's ``service_json`` is the same bytes,
for each partner that could read it, the lists are the same, and every archived row is back.
"""

from __future__ import annotations

import tarfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from sqlalchemy import func, select

from kuitti.archive.tables import PARTS
from kuitti.clock import FrozenClock
from kuitti.models import Receipt
from kuitti.retention import delete_receipts
from kuitti.services import Services
from tests.cards.support import AUTH_CODE, World, make_world
from tests.conftest import LiveServer, empty_tables
from tests.delivery.support import Connected, connect, make_app, make_merchant
from tests.delivery.test_claims import import_as, post_link
from tests.delivery.test_links import login
from tests.factories import auth, receipt_doc
from tests.posting.test_returns import return_doc
from tests.test_cli import run, run_json

URL = "/api/v1/receipts/"


@dataclass
class Month:
    """What the month's readers see, and who they are."""

    world: World
    connected: Connected
    linking: Any  # the merchant whose namespace holds the link
    january: list[str]
    february: str

    def readers(self) -> dict[str, dict[str, str]]:
        return {
            "merchant": auth(self.world.merchant.api_key),
            "linking merchant": auth(self.linking.api_key),
            "issuer": auth(self.world.issuer.api_key),
            "app": self.connected.app_headers(),
        }

    def seen(self) -> dict[str, Any]:
        """Every receipt's service_json as bytes, for each reader that may read it, and each
        reader's list."""
        client = self.world.client
        seen: dict[str, Any] = {}
        for name, headers in self.readers().items():
            for receipt_id in [*self.january, self.february]:
                answer = client.get(f"{URL}{receipt_id}/service_json/", headers=headers)
                seen[f"{name} {receipt_id}"] = (answer.status_code, answer.content)
            listed = client.get(URL, params={"limit": 50}, headers=headers)
            assert listed.status_code == 200, listed.text
            seen[f"{name} list"] = listed.content
        return seen


def rows_of(services: Services, receipt_ids: list[str]) -> dict[str, list[tuple[Any, ...]]]:
    ids = [uuid.UUID(r) for r in receipt_ids]
    found = {}
    with services.db.session(write=False) as session:
        for part in PARTS:
            column = part.table.c[part.receipt_column]
            rows = session.execute(select(part.table).where(column.in_(ids)))
            found[part.name] = sorted((tuple(row) for row in rows), key=str)
    return found


@pytest.fixture
def month(
    services: Services, client: httpx.Client, clock: FrozenClock, live_server: LiveServer
) -> Month:
    world = make_world(services, client, clock)
    connected = connect(services, make_app(services), world.user)
    world.enroll()
    bought = world.receipt()  # 2026-01-15, waiting for its card transaction
    world.transaction(authorization_code=AUTH_CODE)  # which matches it to the holder's card
    returned = client.post(
        URL, json=return_doc(originalReceiptId=bought), headers=auth(world.merchant.api_key)
    )
    assert returned.status_code == 200, returned.text
    linking = make_merchant(services, "Linkki Oy")
    claimed = post_link(client, linking, "till-0001-0001")["receipt_id"]
    with httpx.Client(base_url=live_server.url, timeout=30) as browser:
        login(browser, "maija@example.com")
        assert import_as(browser, "/ns/kauppa/r/till-0001-0001").status_code == 303
    february = receipt_doc(receiptNumber="R-2026-0201", receiptTimeStamp="2026-02-02T09:00:00Z")
    later = world.receipt(february, match=False)
    return Month(world, connected, linking, [bought, returned.json()["receipt_id"], claimed], later)


def test_export_delete_restore_reads_exactly_as_before(
    services: Services, month: Month, tmp_path: Path
) -> None:
    before, rows = month.seen(), rows_of(services, month.january)
    assert all(rows.values()), rows  # the month has a row in every table
    archive = tmp_path / "january.tar"

    exported = run_json(
        services, "archive", "export", "--month", "2026-01", "--output", str(archive)
    )
    assert exported["receipts"] == 3
    assert exported["tables"] == {name: len(found) for name, found in rows.items()}
    assert run_json(services, "archive", "verify", str(archive))["ok"] is True

    with services.db.session() as session:
        delete_receipts(session, [uuid.UUID(r) for r in month.january])
    gone = month.seen()
    assert gone[f"merchant {month.january[0]}"][0] == 404
    assert gone[f"merchant {month.february}"] == before[f"merchant {month.february}"]

    restored = run_json(services, "archive", "restore", str(archive))
    assert (restored["restored"], restored["skipped"], restored["originals_unlinked"]) == (3, 0, 0)
    assert month.seen() == before
    assert rows_of(services, month.january) == rows

    again = run_json(services, "archive", "restore", str(archive))
    assert (again["restored"], again["skipped"]) == (0, 3)
    assert rows_of(services, month.january) == rows


def test_an_archive_holds_only_its_month(services: Services, month: Month, tmp_path: Path) -> None:
    archive = tmp_path / "february.tar"
    exported = run_json(
        services, "archive", "export", "--month", "2026-02", "--output", str(archive)
    )
    assert exported["receipts"] == 1
    empty = run_json(
        services, "archive", "export", "--month", "2026-03", "--output", str(tmp_path / "m.tar")
    )
    assert empty["tables"] == {part.name: 0 for part in PARTS}


def test_a_link_taken_since_refuses_the_restore_and_writes_nothing(
    services: Services, month: Month, tmp_path: Path
) -> None:
    archive = tmp_path / "january.tar"
    run_json(services, "archive", "export", "--month", "2026-01", "--output", str(archive))
    with services.db.session() as session:
        delete_receipts(session, [uuid.UUID(r) for r in month.january])
    # The identifier is free again, and the till uses it for a new receipt.
    post_link(month.world.client, month.linking, "till-0001-0001")
    refused = run(services, "archive", "restore", str(archive), "--json")
    assert refused.exit_code == 1, refused.output
    assert "receipt_links: 1 link(s) belong to other receipts now" in refused.stdout
    with services.db.session(write=False) as session:
        ids = [uuid.UUID(r) for r in month.january]
        assert list(session.scalars(select(Receipt.id).where(Receipt.id.in_(ids)))) == []


def test_a_damaged_archive_fails_verify_and_is_not_restored(
    services: Services, month: Month, tmp_path: Path
) -> None:
    archive = tmp_path / "january.tar"
    run_json(services, "archive", "export", "--month", "2026-01", "--output", str(archive))
    with tarfile.open(archive) as tar:
        member = tar.getmember("receipts.jsonl.zst")
    data = bytearray(archive.read_bytes())
    data[member.offset_data + member.size // 2] ^= 0xFF  # one bit flipped in the receipts
    damaged = tmp_path / "damaged.tar"
    damaged.write_bytes(bytes(data))
    verified = run(services, "archive", "verify", str(damaged), "--json")
    assert verified.exit_code == 1
    assert '"ok":false' in verified.stdout
    with services.db.session() as session:
        delete_receipts(session, [uuid.UUID(r) for r in month.january])
    refused = run(services, "archive", "restore", str(damaged))
    assert refused.exit_code == 1
    assert "not whole" in refused.stdout


def test_export_refuses_a_month_it_cannot_read_and_a_file_that_exists(
    services: Services, tmp_path: Path
) -> None:
    assert run(services, "archive", "export", "--month", "2026-13").exit_code == 2
    existing = tmp_path / "x.tar"
    existing.write_bytes(b"")
    taken = run(services, "archive", "export", "--month", "2026-01", "--output", str(existing))
    assert taken.exit_code == 2
    assert existing.read_bytes() == b""


def test_a_database_without_the_months_partners_refuses_the_restore(
    services: Services, month: Month, tmp_path: Path
) -> None:
    archive = tmp_path / "january.tar"
    run_json(services, "archive", "export", "--month", "2026-01", "--output", str(archive))
    empty_tables(services.db)  # another database: none of the partners, users or cards
    refused = run(services, "archive", "restore", str(archive), "--json")
    assert refused.exit_code == 1, refused.output
    problems = orjson.loads(refused.stdout)["problems"]
    assert any(p.startswith("receipts.partner_id: 2 of the partners it names") for p in problems)
    assert any(p.startswith("receipt_grants.connection_id: 1 of the connections") for p in problems)
    with services.db.session(write=False) as session:
        assert session.scalar(select(func.count()).select_from(Receipt)) == 0


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"", "not a readable tar file"),
        (b"receipts" * 100, "not a readable tar file"),
    ],
)
def test_what_is_not_an_archive_is_named_so(
    services: Services, tmp_path: Path, content: bytes, problem: str
) -> None:
    path = tmp_path / "not.tar"
    path.write_bytes(content)
    result = run(services, "archive", "verify", str(path), "--json")
    assert result.exit_code == 1
    assert problem in orjson.loads(result.stdout)["problem"]


def test_a_cut_short_archive_is_not_whole(services: Services, month: Month, tmp_path: Path) -> None:
    archive = tmp_path / "january.tar"
    run_json(services, "archive", "export", "--month", "2026-01", "--output", str(archive))
    with tarfile.open(archive) as tar:
        member = tar.getmember("receipts.jsonl.zst")
    cut = tmp_path / "cut.tar"
    cut.write_bytes(archive.read_bytes()[: member.offset_data + member.size // 2])
    result = run(services, "archive", "verify", str(cut), "--json")
    assert result.exit_code == 1
    assert orjson.loads(result.stdout)["ok"] is False
