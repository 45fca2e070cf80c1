"""Namespace links are claim-once (docs/security.md, "Namespace links"): a stranger who guesses a
merchant's identifiers can read the receipts but not take one that an account already holds;
shareable links and private links stay importable by many."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import httpx
import pytest

from kuitti.partners.service import NewPartner
from kuitti.services import Services
from tests.conftest import LiveServer
from tests.delivery.support import owners, post_receipt
from tests.delivery.test_links import login, path_of
from tests.factories import make_user, receipt_doc, token_body


def post_link(
    client: httpx.Client, merchant: NewPartner, identifier: str, **token: Any
) -> dict[str, Any]:
    body = token_body(
        receipt_doc(),
        {"type": "RECEIPT_ID", "value": identifier, "namespace": "kauppa", **token},
    )
    response = post_receipt(client, merchant, body)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def import_as(client: httpx.Client, path: str) -> httpx.Response:
    client.get(path)
    return client.post(path, data={"action": "import", "csrf_token": client.cookies["kuitti_csrf"]})


@pytest.fixture
def stranger(live_server: LiveServer, services: Services) -> Iterator[httpx.Client]:
    make_user(services, "vieras@example.com")
    with httpx.Client(base_url=live_server.url, timeout=30) as http:
        login(http, "vieras@example.com")
        yield http


class TestClaimOnce:
    def test_a_stranger_who_enumerates_links_cannot_import_a_claimed_receipt(
        self,
        client: httpx.Client,
        services: Services,
        merchant: NewPartner,
        user: Any,
        stranger: httpx.Client,
    ) -> None:
        created = [post_link(client, merchant, f"till-0001-{n:04d}") for n in range(1, 6)]
        login(client, "maija@example.com")
        assert import_as(client, "/ns/kauppa/r/till-0001-0003").status_code == 303
        found = [
            n
            for n in range(1, 8)
            if stranger.get(f"/ns/kauppa/r/till-0001-{n:04d}").status_code == 200
        ]
        assert found == [1, 2, 3, 4, 5]  # the identifiers are guessable: the pages show
        refused = import_as(stranger, "/ns/kauppa/r/till-0001-0003?lang=fi")
        assert refused.status_code == 409
        assert "Kuitti on jo toisella tilillä" in refused.text
        assert refused.headers["x-robots-tag"] == "noindex, nofollow"
        assert owners(services, created[2]["receipt_id"]) == [user.id]
        swedish = import_as(stranger, "/ns/kauppa/r/till-0001-0003?lang=sv")
        assert "Kvittot finns redan på ett annat konto" in swedish.text
        english = import_as(stranger, "/ns/kauppa/r/till-0001-0003")
        assert "This receipt is already in another account" in english.text
        # The one nobody imported goes to the first account that does, and only to it.
        assert import_as(stranger, "/ns/kauppa/r/till-0001-0004").status_code == 303
        assert import_as(client, "/ns/kauppa/r/till-0001-0004").status_code == 409
        assert owners(services, created[3]["receipt_id"]) != [user.id]
        assert len(owners(services, created[3]["receipt_id"])) == 1

    def test_the_holder_imports_again_without_an_error(
        self, client: httpx.Client, services: Services, merchant: NewPartner, user: Any
    ) -> None:
        created = post_link(client, merchant, "L-1")
        login(client, "maija@example.com")
        assert import_as(client, "/ns/kauppa/r/L-1").status_code == 303
        again = import_as(client, "/ns/kauppa/r/L-1")
        assert again.status_code == 303
        assert again.headers["location"] == "/ns/kauppa/r/L-1?imported=1"
        assert owners(services, created["receipt_id"]) == [user.id]

    def test_a_receipt_that_reached_an_account_at_post_time_is_held_by_it(
        self,
        client: httpx.Client,
        services: Services,
        merchant: NewPartner,
        user: Any,
        stranger: httpx.Client,
    ) -> None:
        body = token_body(
            receipt_doc(),
            {"type": "RECEIPT_ID", "value": "L-9", "namespace": "kauppa"},
            {"type": "EMAIL", "value": "maija@example.com"},
        )
        created = post_receipt(client, merchant, body).json()
        assert import_as(stranger, "/ns/kauppa/r/L-9").status_code == 409
        assert owners(services, created["receipt_id"]) == [user.id]

    def test_a_shareable_link_is_importable_by_many(
        self,
        client: httpx.Client,
        services: Services,
        merchant: NewPartner,
        user: Any,
        stranger: httpx.Client,
    ) -> None:
        created = post_link(client, merchant, "JAETTU-1", shareable=True)
        held = post_link(client, merchant, "OMA-1", shareable=False)
        login(client, "maija@example.com")
        for path in ("/ns/kauppa/r/JAETTU-1", "/ns/kauppa/r/OMA-1"):
            assert import_as(client, path).status_code == 303
        assert import_as(stranger, "/ns/kauppa/r/JAETTU-1").status_code == 303
        assert import_as(stranger, "/ns/kauppa/r/OMA-1").status_code == 409
        assert len(set(owners(services, created["receipt_id"]))) == 2
        assert owners(services, held["receipt_id"]) == [user.id]

    def test_a_private_link_stays_importable_by_whoever_has_it(
        self,
        client: httpx.Client,
        services: Services,
        merchant: NewPartner,
        user: Any,
        stranger: httpx.Client,
    ) -> None:
        created = post_link(client, merchant, "L-2")
        login(client, "maija@example.com")
        assert import_as(client, "/ns/kauppa/r/L-2").status_code == 303
        private = path_of(created["receipt_web_url"])
        assert import_as(stranger, private).status_code == 303
        assert len(set(owners(services, created["receipt_id"]))) == 2

    @pytest.mark.parametrize("value", ["yes", 1, {}])
    def test_shareable_must_be_a_boolean_on_the_post_and_the_dry_run(
        self, client: httpx.Client, merchant: NewPartner, value: object
    ) -> None:
        body = token_body(
            receipt_doc(),
            {"type": "RECEIPT_ID", "value": "L-3", "namespace": "kauppa", "shareable": value},
        )
        for url in ("/api/v1/receipts/", "/api/v1/receipts/validate"):
            response = client.post(
                url, json=body, headers={"Authorization": f"Token {merchant.api_key}"}
            )
            assert response.status_code == 400, response.text
            assert response.json() == {
                "error": "invalid_token",
                "decription": "attributes.tokens[0]: shareable must be true or false.",
            }
        assert client.get("/ns/kauppa/r/L-3").status_code == 404


@pytest.fixture
def closing() -> Iterator[ExitStack]:
    with ExitStack() as stack:
        yield stack


class TestClaimRace:
    ACCOUNTS = 5
    ROUNDS = 4

    def test_of_accounts_importing_at_once_exactly_one_holds_the_receipt(
        self,
        client: httpx.Client,
        live_server: LiveServer,
        services: Services,
        merchant: NewPartner,
        closing: ExitStack,
    ) -> None:
        clients = []
        for n in range(self.ACCOUNTS):
            make_user(services, f"kilpailija{n}@example.com")
            http = closing.enter_context(httpx.Client(base_url=live_server.url, timeout=60))
            login(http, f"kilpailija{n}@example.com")
            clients.append(http)
        for round_ in range(self.ROUNDS):
            created = post_link(client, merchant, f"KILPA-{round_}")
            path = f"/ns/kauppa/r/KILPA-{round_}"
            for http in clients:
                http.get(path)
            start = threading.Barrier(self.ACCOUNTS)
            codes: list[int] = []

            def run(
                http: httpx.Client,
                path: str = path,
                start: threading.Barrier = start,
                codes: list[int] = codes,
            ) -> None:
                start.wait()
                response = http.post(
                    path, data={"action": "import", "csrf_token": http.cookies["kuitti_csrf"]}
                )
                codes.append(response.status_code)

            threads = [threading.Thread(target=run, args=(http,)) for http in clients]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert sorted(codes) == [303] + [409] * (self.ACCOUNTS - 1)
            assert len(owners(services, created["receipt_id"])) == 1
