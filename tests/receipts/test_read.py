"""Reading a receipt with the partner key, and the list endpoint with cursor pagination."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from kuitti.models import PartnerRole
from kuitti.services import Services
from tests.conftest import StatementCounter
from tests.factories import auth, make_partner, receipt_doc
from tests.test_cli import run, run_json

LIST = "/api/v1/receipts/"


def create(client: httpx.Client, key: str, **changes: Any) -> str:
    response = client.post(LIST, json=receipt_doc(**changes), headers=auth(key))
    assert response.status_code == 200, response.text
    receipt_id: str = response.json()["receipt_id"]
    return receipt_id


class TestGetReceipt:
    def test_poster_reads_service_json(self, client: httpx.Client, services: Services) -> None:
        merchant = make_partner(services)
        doc = receipt_doc(unknownKey="kept")
        receipt_id = client.post(LIST, json=doc, headers=auth(merchant.api_key)).json()[
            "receipt_id"
        ]
        for header in (merchant.api_key, f"Token {merchant.api_key}"):
            response = client.get(
                f"/api/v1/receipts/{receipt_id}/service_json/", headers={"Authorization": header}
            )
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("application/json")
            assert response.json() == doc

    def test_without_trailing_slash(self, client: httpx.Client, services: Services) -> None:
        merchant = make_partner(services)
        receipt_id = create(client, merchant.api_key)
        response = client.get(
            f"/api/v1/receipts/{receipt_id}/service_json", headers=auth(merchant.api_key)
        )
        assert response.status_code == 200

    def test_other_partner_gets_404_like_a_missing_receipt(
        self, client: httpx.Client, services: Services
    ) -> None:
        merchant = make_partner(services)
        other = make_partner(services, name="Other")
        receipt_id = create(client, merchant.api_key)
        foreign = client.get(
            f"/api/v1/receipts/{receipt_id}/service_json/", headers=auth(other.api_key)
        )
        missing = client.get(
            f"/api/v1/receipts/{uuid.uuid4()}/service_json/", headers=auth(other.api_key)
        )
        assert foreign.status_code == missing.status_code == 404
        assert foreign.json() == missing.json()
        assert foreign.json()["error"] == "not_found"

    @pytest.mark.parametrize("receipt_id", ["not-a-uuid", "1", "%00"])
    def test_malformed_id_is_404(
        self, client: httpx.Client, services: Services, receipt_id: str
    ) -> None:
        merchant = make_partner(services)
        response = client.get(
            f"/api/v1/receipts/{receipt_id}/service_json/", headers=auth(merchant.api_key)
        )
        assert response.status_code == 404

    def test_unknown_format_is_400(self, client: httpx.Client, services: Services) -> None:
        merchant = make_partner(services)
        receipt_id = create(client, merchant.api_key)
        response = client.get(
            f"/api/v1/receipts/{receipt_id}/word_doc/", headers=auth(merchant.api_key)
        )
        assert response.status_code == 400
        assert response.json()["error"] == "invalid_value"
        assert "service_json" in response.json()["decription"]

    def test_no_key_is_401(self, client: httpx.Client, services: Services) -> None:
        merchant = make_partner(services)
        receipt_id = create(client, merchant.api_key)
        response = client.get(f"/api/v1/receipts/{receipt_id}/service_json/")
        assert response.status_code == 401

    def test_bearer_without_service_apikey_is_401(
        self, client: httpx.Client, services: Services
    ) -> None:
        merchant = make_partner(services)
        receipt_id = create(client, merchant.api_key)
        response = client.get(
            f"/api/v1/receipts/{receipt_id}/service_json/",
            headers={"Authorization": "Bearer a.b.c"},
        )
        assert response.status_code == 401


class TestReadCost:
    """What the read path does per request (docs/performance.md, "Reading")."""

    def test_a_read_is_one_query(
        self, client: httpx.Client, services: Services, sql: StatementCounter
    ) -> None:
        """The key's partner, the receipt, its poster and the right to read it at once."""
        merchant = make_partner(services)
        receipt_id = create(client, merchant.api_key)
        path = f"/api/v1/receipts/{receipt_id}/service_json/"
        assert client.get(path, headers=auth(merchant.api_key)).status_code == 200
        with sql.counting() as statements:
            assert client.get(path, headers=auth(merchant.api_key)).status_code == 200
        queries = [s for s in statements if s.lstrip().upper().startswith("SELECT")]
        assert len(queries) == 1, queries

    def test_a_list_page_is_one_query(
        self, client: httpx.Client, services: Services, sql: StatementCounter
    ) -> None:
        """A partner key's page proves the key: only an enabled partner's key finds grants."""
        merchant = make_partner(services)
        for _ in range(3):
            create(client, merchant.api_key)
        assert client.get(LIST, headers=auth(merchant.api_key)).status_code == 200
        with sql.counting() as statements:
            listed = client.get(LIST, headers=auth(merchant.api_key)).json()
        assert len(listed["receipts"]) == 3
        queries = [s for s in statements if s.lstrip().upper().startswith("SELECT")]
        assert len(queries) == 1, queries

    def test_an_empty_page_still_checks_the_key(
        self, client: httpx.Client, services: Services
    ) -> None:
        merchant = make_partner(services)
        empty = client.get(LIST, headers=auth(merchant.api_key))
        assert (empty.status_code, empty.json()) == (200, {"receipts": [], "next_cursor": None})
        assert client.get(LIST, headers=auth("not-a-key")).status_code == 401

    def test_a_bad_key_is_401_before_a_bad_parameter_is_400(
        self, client: httpx.Client, services: Services
    ) -> None:
        merchant = make_partner(services)
        receipt_id = create(client, merchant.api_key)
        for path in (
            f"{LIST}?limit=0",
            f"{LIST}?cursor=not-a-cursor",
            f"{LIST}?since=2026-01-01T00:00:00",
            f"/api/v1/receipts/{receipt_id}/service_json/?layout=x",
        ):
            assert client.get(path, headers=auth("not-a-key")).status_code == 401
            answer = client.get(path, headers=auth(merchant.api_key))
            assert answer.status_code == 400, answer.text


class TestListReceipts:
    def test_newest_first_with_fields(self, client: httpx.Client, services: Services) -> None:
        merchant = make_partner(services)
        old = create(client, merchant.api_key, receiptTimeStamp="2026-01-10T09:00:00+02:00")
        new = create(client, merchant.api_key, receiptTimeStamp="2026-01-12T09:00:00+02:00")
        body = client.get(LIST, headers=auth(merchant.api_key)).json()
        assert [r["receipt_id"] for r in body["receipts"]] == [new, old]
        first = body["receipts"][0]
        assert first == {
            "receipt_id": new,
            "merchant_name": "Kauppa Oy",
            "receipt_time": "2026-01-12T09:00:00+02:00",
            "total": receipt_doc()["totalPriceIncVAT"],
            "currency": "EUR",
        }
        assert body["next_cursor"] is None

    def test_order_is_by_instant_not_by_text(
        self, client: httpx.Client, services: Services
    ) -> None:
        merchant = make_partner(services)
        # 10:00+02:00 is 08:00Z, later than 07:30Z written as 07:30+00:00.
        later = create(client, merchant.api_key, receiptTimeStamp="2026-01-10T10:00:00+02:00")
        earlier = create(client, merchant.api_key, receiptTimeStamp="2026-01-10T07:30:00+00:00")
        body = client.get(LIST, headers=auth(merchant.api_key)).json()
        assert [r["receipt_id"] for r in body["receipts"]] == [later, earlier]

    def test_cursor_walks_every_receipt_once(
        self, client: httpx.Client, services: Services
    ) -> None:
        merchant = make_partner(services)
        stamps = [f"2026-01-{day:02d}T12:00:00+02:00" for day in range(1, 8)]
        # Two receipts share a timestamp: ties are broken by receipt id.
        created = {
            create(client, merchant.api_key, receiptTimeStamp=s) for s in [*stamps, stamps[3]]
        }
        seen: list[str] = []
        cursor = None
        pages = 0
        while True:
            params: dict[str, Any] = {"limit": 3}
            if cursor:
                params["cursor"] = cursor
            body = client.get(LIST, params=params, headers=auth(merchant.api_key)).json()
            seen += [r["receipt_id"] for r in body["receipts"]]
            pages += 1
            cursor = body["next_cursor"]
            if cursor is None:
                break
        assert pages == 3
        assert len(seen) == len(set(seen)) == len(created)
        assert set(seen) == created

    def test_a_page_ends_between_receipts_of_one_instant_written_differently(
        self, client: httpx.Client, services: Services
    ) -> None:
        """The cursor's time comes from the last row's receiptTimeStamp text: whatever offset,
        precision or spelling it has, the next page starts right after that receipt."""
        merchant = make_partner(services)
        same_instant = [
            "2026-01-05T12:00:00.1234567+02:00",  # beyond microseconds: cut, as when stored
            "2026-01-05T10:00:00.123456Z",
            "2026-01-05 09:30:00.123456-00:30",
        ]
        created = {create(client, merchant.api_key, receiptTimeStamp=s) for s in same_instant}
        later = create(client, merchant.api_key, receiptTimeStamp="2026-01-05T10:00:00.123457Z")
        first = client.get(LIST, params={"limit": 2}, headers=auth(merchant.api_key)).json()
        second = client.get(
            LIST,
            params={"limit": 2, "cursor": first["next_cursor"]},
            headers=auth(merchant.api_key),
        ).json()
        first_ids = [r["receipt_id"] for r in first["receipts"]]
        second_ids = [r["receipt_id"] for r in second["receipts"]]
        assert first_ids[0] == later
        assert set(first_ids[1:] + second_ids) == created
        assert len(second_ids) == 2
        assert second["next_cursor"] is None

    def test_since_filters(self, client: httpx.Client, services: Services) -> None:
        merchant = make_partner(services)
        create(client, merchant.api_key, receiptTimeStamp="2026-01-10T09:00:00+02:00")
        recent = create(client, merchant.api_key, receiptTimeStamp="2026-01-12T09:00:00+02:00")
        body = client.get(
            LIST, params={"since": "2026-01-11T00:00:00Z"}, headers=auth(merchant.api_key)
        ).json()
        assert [r["receipt_id"] for r in body["receipts"]] == [recent]

    def test_only_own_receipts(self, client: httpx.Client, services: Services) -> None:
        merchant = make_partner(services)
        other = make_partner(services, name="Other")
        create(client, merchant.api_key)
        assert client.get(LIST, headers=auth(other.api_key)).json()["receipts"] == []

    @pytest.mark.parametrize(
        "params",
        [{"limit": 0}, {"limit": 1000}, {"cursor": "garbage!"}, {"since": "yesterday"}],
        ids=["limit-0", "limit-huge", "cursor", "since"],
    )
    def test_bad_parameters_are_400(
        self, client: httpx.Client, services: Services, params: dict[str, Any]
    ) -> None:
        merchant = make_partner(services)
        response = client.get(LIST, params=params, headers=auth(merchant.api_key))
        assert response.status_code == 400
        assert {"error", "decription"} <= set(
            response.json() if isinstance(response.json(), dict) else response.json()[0]
        )

    def test_any_partner_role_may_list_its_own(
        self, client: httpx.Client, services: Services
    ) -> None:
        issuer = make_partner(services, PartnerRole.CARD_ISSUER, name="Pankki")
        response = client.get(LIST, headers=auth(issuer.api_key))
        assert response.status_code == 200
        assert response.json() == {"receipts": [], "next_cursor": None}


class TestReadChecks:
    """The read routes check the caller, then their parameters, themselves (so the key check
    and the read share one statement); their answers are exactly FastAPI's as before."""

    @pytest.mark.parametrize(
        ("path", "headers", "expected"),
        [
            (
                "{read}?layout=x",
                {},
                {
                    "error": "invalid_value",
                    "decription": "query.layout: Input should be 'a4' or 'roll'",
                },
            ),
            (
                "{read}?lang=" + "x" * 17,
                {},
                {
                    "error": "invalid_value",
                    "decription": "query.lang: String should have at most 16 characters",
                },
            ),
            (
                "{read}?layout=",
                {"If-None-Match": "x" * 2001},
                [
                    {
                        "error": "invalid_value",
                        "decription": "query.layout: Input should be 'a4' or 'roll'",
                    },
                    {
                        "error": "invalid_value",
                        "decription": "header.if-none-match: String should have at most 2000 "
                        "characters",
                    },
                ],
            ),
            (
                f"{LIST}?limit=0",
                {},
                {
                    "error": "invalid_value",
                    "decription": "query.limit: Input should be greater than or equal to 1",
                },
            ),
            (
                f"{LIST}?limit=x&cursor=" + "c" * 201,
                {},
                [
                    {
                        "error": "invalid_value",
                        "decription": "query.limit: Input should be a valid integer, unable to "
                        "parse string as an integer",
                    },
                    {
                        "error": "invalid_value",
                        "decription": "query.cursor: String should have at most 200 characters",
                    },
                ],
            ),
            (
                f"{LIST}?since=2026-01-01T00:00:00",
                {},
                {
                    "error": "invalid_value",
                    "decription": "since: must carry a UTC offset, e.g. +03:00 or Z.",
                },
            ),
        ],
        ids=["layout", "lang", "two-errors", "limit", "list-two-errors", "naive-since"],
    )
    def test_bad_parameters_answer_as_fastapi_did(
        self,
        client: httpx.Client,
        services: Services,
        path: str,
        headers: dict[str, str],
        expected: object,
    ) -> None:
        merchant = make_partner(services)
        read = f"/api/v1/receipts/{create(client, merchant.api_key)}/service_json/"
        url = path.format(read=read)
        answer = client.get(url, headers={**auth(merchant.api_key), **headers})
        assert (answer.status_code, answer.json()) == (400, expected)
        refused = client.get(url, headers={**auth("not-a-key"), **headers})
        assert refused.status_code == 401

    def test_a_malformed_id_of_a_bad_key_is_401(
        self, client: httpx.Client, services: Services
    ) -> None:
        for path in ("/api/v1/receipts/nope/service_json/", "/api/v1/receipts/nope/word_doc/"):
            assert client.get(path, headers=auth("not-a-key")).status_code == 401

    @pytest.mark.parametrize("change", ["rotate", "disable"])
    def test_a_changed_key_is_refused_at_once(
        self, client: httpx.Client, services: Services, change: str
    ) -> None:
        merchant = make_partner(services)
        headers = auth(merchant.api_key)
        read = f"/api/v1/receipts/{create(client, merchant.api_key)}/service_json/"
        assert client.get(read, headers=headers).status_code == 200
        assert client.get(LIST, headers=headers).status_code == 200
        partner_id = str(merchant.partner.id)
        if change == "rotate":
            run_json(services, "partner", "rotate", partner_id, "--secret", "api_key")
        else:
            assert run(services, "partner", "disable", partner_id).exit_code == 0
        for path in (read, LIST):
            refused = client.get(path, headers=headers)
            assert (refused.status_code, refused.json()) == (
                401,
                {"error": "unauthorized", "decription": "The API key is not valid."},
            )

    def test_the_key_may_come_in_service_apikey(
        self, client: httpx.Client, services: Services
    ) -> None:
        merchant = make_partner(services)
        read = f"/api/v1/receipts/{create(client, merchant.api_key)}/service_json/"
        for header in ("SERVICE_APIKEY", "Service-Apikey"):
            answer = client.get(read, headers={header: merchant.api_key})
            assert answer.status_code == 200
            assert client.get(LIST, headers={header: merchant.api_key}).status_code == 200


def test_the_read_routes_still_describe_their_parameters(client: httpx.Client) -> None:
    """FastAPI no longer checks them, but the OpenAPI document describes them as it did."""
    paths = client.get("/openapi.json").json()["paths"]
    described = {
        path: [(p["in"], p["name"], p["required"]) for p in paths[path]["get"]["parameters"]]
        for path in (LIST, "/api/v1/receipts/{receipt_id}/{data_format}/")
    }
    assert described == {
        LIST: [("query", "since", False), ("query", "limit", False), ("query", "cursor", False)],
        "/api/v1/receipts/{receipt_id}/{data_format}/": [
            ("path", "receipt_id", True),
            ("path", "data_format", True),
            ("query", "layout", False),
            ("query", "lang", False),
            ("header", "accept-language", False),
            ("header", "if-none-match", False),
        ],
    }
    layout = paths["/api/v1/receipts/{receipt_id}/{data_format}/"]["get"]["parameters"][2]
    assert layout["schema"] == {
        "$ref": "#/components/schemas/Layout",
        "default": "a4",
        "description": "service_pdf page layout: a4 (default) or roll (80 mm).",
    }
    limit = paths[LIST]["get"]["parameters"][1]["schema"]
    assert (limit["minimum"], limit["maximum"], limit["default"]) == (1, 200, 50)
