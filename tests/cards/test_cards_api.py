"""``POST /api/v1/cards/``, ``DELETE /api/v1/cards/<id>/``, ``POST /api/v1/card-transactions/``:
who may call them, what they accept, and ``card_for_token`` (the CARD token)."""

from __future__ import annotations

import uuid

import httpx
import orjson
import pytest
from sqlalchemy import select, text

from kuitti.cards.service import card_for_token
from kuitti.models import Card, PartnerRole
from tests.cards.support import AUTH_CODE, World
from tests.factories import auth, make_partner
from tests.oauth.flow import REDIRECT_URI, connect

FULL_PAN = "4153011234561234"
CARD = {"partner_card_id": "card-1", "masked_pan": "415301******1234", "exp_date": "2028-12"}


class TestAuthentication:
    def test_without_a_key_is_401(self, world: World) -> None:
        answer = world.client.post("/api/v1/cards/", json=CARD)
        assert answer.status_code == 401
        assert answer.json()["error"] == "unauthorized"

    def test_a_merchant_key_is_403(self, world: World) -> None:
        answer = world.client.post(
            "/api/v1/cards/", json=CARD, headers=auth(world.merchant.api_key)
        )
        assert answer.status_code == 403
        assert answer.json()["error"] == "forbidden"

    @pytest.mark.parametrize("header", ["SERVICE_APIKEY", "Service-Apikey", "Authorization"])
    def test_the_issuer_key_in_any_accepted_header(self, world: World, header: str) -> None:
        value = (
            f"Token {world.issuer.api_key}" if header == "Authorization" else world.issuer.api_key
        )
        answer = world.client.post("/api/v1/cards/", json=CARD, headers={header: value})
        assert answer.status_code == 200, answer.text

    def test_without_trailing_slash_too(self, world: World) -> None:
        answer = world.client.post("/api/v1/cards", json=CARD, headers=auth(world.issuer.api_key))
        assert answer.status_code == 200


class TestEnrol:
    def test_answer_and_stored_card(self, world: World) -> None:
        answer = world.client.post(
            "/api/v1/cards/",
            json={**CARD, "masked_pan": "4153 01XX XXXX 1234", "name": "Maija M"},
            headers=auth(world.issuer.api_key),
        )
        assert answer.status_code == 200
        body = answer.json()
        assert body == {
            "service_card_id": body["service_card_id"],
            "partner_card_id": "card-1",
            "masked_pan": "415301******1234",
            "exp_date": "2028-12-31T23:59:59Z",
            "name": "Maija M",
            "pilot": False,
        }

    def test_iso_exp_date(self, world: World) -> None:
        answer = world.client.post(
            "/api/v1/cards/",
            json={**CARD, "exp_date": "2029-01-31T23:59:59+02:00"},
            headers=auth(world.issuer.api_key),
        )
        assert answer.json()["exp_date"] == "2029-01-31T21:59:59Z"

    @pytest.mark.parametrize(
        "masked",
        ["1234", "************1234", "415301******12", "41530*******1234", "4153011*****1234"],
    )
    def test_masked_pan_must_show_first_six_and_last_four(self, world: World, masked: str) -> None:
        answer = world.client.post(
            "/api/v1/cards/",
            json={**CARD, "masked_pan": masked},
            headers=auth(world.issuer.api_key),
        )
        assert answer.status_code == 400
        assert answer.json()["error"] == "invalid_value"
        assert answer.json()["decription"].startswith("masked_pan:")

    def test_every_problem_at_once(self, world: World) -> None:
        answer = world.client.post(
            "/api/v1/cards/", json={"exp_date": "soon"}, headers=auth(world.issuer.api_key)
        )
        assert answer.status_code == 400
        codes = sorted(e["error"] for e in answer.json())
        assert codes == ["invalid_value", "missing_field", "missing_field"]

    def test_full_card_number_is_refused_and_never_stored_or_logged(
        self, world: World, capfd: pytest.CaptureFixture[str]
    ) -> None:
        answer = world.client.post(
            "/api/v1/cards/",
            json={**CARD, "masked_pan": FULL_PAN},
            headers=auth(world.issuer.api_key),
        )
        assert answer.status_code == 400
        assert "full card number" in answer.json()["decription"]
        assert FULL_PAN not in answer.text
        spaced = world.client.post(
            "/api/v1/cards/",
            json={**CARD, "masked_pan": "4153 0112 3456 1234"},
            headers=auth(world.issuer.api_key),
        )
        assert spaced.status_code == 400
        out, err = capfd.readouterr()
        assert FULL_PAN not in out + err
        assert "4153 0112" not in out + err
        with world.services.db.session(write=False) as session:
            assert session.scalars(select(Card)).all() == []
            dump = orjson.dumps(
                [list(r) for r in session.execute(text("SELECT * FROM webhook_deliveries"))],
                default=str,
            ).decode()
            assert FULL_PAN not in dump

    def test_same_id_same_card_is_idempotent_other_details_conflict(self, world: World) -> None:
        first = world.client.post("/api/v1/cards/", json=CARD, headers=auth(world.issuer.api_key))
        again = world.client.post("/api/v1/cards/", json=CARD, headers=auth(world.issuer.api_key))
        assert again.json()["service_card_id"] == first.json()["service_card_id"]
        assert len(world.webhooks("card_added")) == 1
        other = world.client.post(
            "/api/v1/cards/",
            json={**CARD, "masked_pan": "415301******9999"},
            headers=auth(world.issuer.api_key),
        )
        assert other.status_code == 409
        assert other.json()["error"] == "duplicate_partner_card_id"

    def test_another_issuer_may_use_the_same_partner_card_id(self, world: World) -> None:
        bank = make_partner(world.services, PartnerRole.CARD_ISSUER, name="Toinen Pankki")
        world.client.post("/api/v1/cards/", json=CARD, headers=auth(world.issuer.api_key))
        answer = world.client.post("/api/v1/cards/", json=CARD, headers=auth(bank.api_key))
        assert answer.status_code == 200

    def test_holder_bearer_token_links_the_card_to_the_user(
        self, services: object, client: httpx.Client, world: World
    ) -> None:
        bank = make_partner(
            world.services,
            PartnerRole.CARD_ISSUER,
            PartnerRole.APP,
            name="Pankki App",
            redirect_uris=[REDIRECT_URI],
        )
        token = connect(world.client, bank, "maija@example.com", scope="receipt:read")
        answer = world.client.post(
            "/api/v1/cards/",
            json=CARD,
            headers={"SERVICE_APIKEY": bank.api_key, "Authorization": f"Bearer {token}"},
        )
        assert answer.status_code == 200, answer.text
        with world.services.db.session(write=False) as session:
            card = session.get(Card, uuid.UUID(answer.json()["service_card_id"]))
            assert card is not None
            assert card.user_id == world.user.id
        bad = world.client.post(
            "/api/v1/cards/",
            json={**CARD, "partner_card_id": "card-2"},
            headers={"SERVICE_APIKEY": bank.api_key, "Authorization": "Bearer not.a.token"},
        )
        assert bad.status_code == 401


class TestDelete:
    def test_a_deleted_card_never_matches(self, world: World) -> None:
        card = world.enroll()
        answer = world.client.delete(f"/api/v1/cards/{card}/", headers=auth(world.issuer.api_key))
        assert answer.status_code == 200
        assert answer.json()["deleted"] is True
        world.transaction(authorization_code=AUTH_CODE, expect=404)
        receipt = world.receipt()
        assert world.owners(receipt) == set()
        # The id may be enrolled again (a new card).
        assert world.enroll() != card

    def test_a_card_deleted_after_its_transaction_never_matches(self, world: World) -> None:
        card = world.enroll()
        world.transaction(authorization_code=AUTH_CODE)
        world.client.delete(f"/api/v1/cards/{card}", headers=auth(world.issuer.api_key))
        assert world.owners(world.receipt()) == set()

    def test_another_issuers_card_is_404(self, world: World) -> None:
        card = world.enroll()
        bank = make_partner(world.services, PartnerRole.CARD_ISSUER, name="Toinen Pankki")
        answer = world.client.delete(f"/api/v1/cards/{card}/", headers=auth(bank.api_key))
        assert answer.status_code == 404
        assert (
            world.client.delete("/api/v1/cards/nonsense/", headers=auth(bank.api_key)).status_code
            == 404
        )


class TestTransactions:
    def test_by_service_card_id(self, world: World) -> None:
        card = world.enroll()
        answer = world.transaction(None, service_card_id=card, authorization_code=AUTH_CODE)
        assert answer["service_card_id"] == card
        assert answer["partner_card_id"] == "card-1"

    def test_another_issuers_card_is_404(self, world: World) -> None:
        world.enroll()
        bank = make_partner(world.services, PartnerRole.CARD_ISSUER, name="Toinen Pankki")
        world.transaction(issuer=bank, expect=404)

    @pytest.mark.parametrize(
        ("change", "code"),
        [
            ({"transaction_type": "refund"}, "invalid_value"),
            ({"amount": "8.49"}, "invalid_type"),
            ({"amount": None}, "missing_field"),
            ({"timestamp": "2026-01-15T12:03:11"}, "invalid_value"),
            ({"currency": "EURO"}, "invalid_value"),
            ({"merchant_id": None}, "missing_field"),
        ],
    )
    def test_invalid_fields(self, world: World, change: dict[str, object], code: str) -> None:
        world.enroll()
        body: dict[str, object] = {
            "partner_card_id": "card-1",
            "transaction_type": "auth",
            "amount": 849,
            "currency": "EUR",
            "timestamp": "2026-01-15T14:03:11+02:00",
            "merchant_id": "MID-000123",
            "merchant_name": "Kauppa",
        }
        body.update(change)
        body = {k: v for k, v in body.items() if v is not None}
        answer = world.client.post(
            "/api/v1/card-transactions/", json=body, headers=auth(world.issuer.api_key)
        )
        assert answer.status_code == 400
        assert answer.json()["error"] == code


class TestRejectedBeforeTheWriteUnit:
    """A refused body never waits for the database's writer: the write unit opens only once the
    request is accepted (``kuitti/deps.py``)."""

    @pytest.mark.parametrize(
        ("path", "body"),
        [
            ("/api/v1/cards/", {**CARD, "masked_pan": FULL_PAN}),
            ("/api/v1/card-transactions/", {"transaction_type": "refund"}),
            ("/api/v1/cards/", b"{not json"),
        ],
    )
    def test_while_another_transaction_holds_the_write_lock(
        self, world: World, path: str, body: dict[str, object] | bytes
    ) -> None:
        content = body if isinstance(body, bytes) else orjson.dumps(body)
        headers = {**auth(world.issuer.api_key), "Content-Type": "application/json"}
        with world.services.db.session() as held:  # SQLite: BEGIN IMMEDIATE, the one writer
            held.execute(text("UPDATE partners SET name = name"))
            answer = world.client.post(path, content=content, headers=headers, timeout=10)
        assert answer.status_code == 400, answer.text


class TestCardForToken:
    def test_unique_partner_card_id_with_agreeing_pan(self, world: World) -> None:
        card = world.enroll()
        with world.services.db.session(write=False) as session:
            found = card_for_token(session, "card-1", "************1234", None, sandbox=False)
            assert found is not None
            assert str(found.id) == card
            assert (
                card_for_token(session, "card-1", "************9999", None, sandbox=False) is None
            )
            assert (
                card_for_token(session, "card-1", "552211******1234", None, sandbox=False) is None
            )
            assert card_for_token(session, "card-1", "****", None, sandbox=False) is None
            assert (
                card_for_token(session, "card-2", "************1234", None, sandbox=False) is None
            )

    def test_the_namespace_names_the_issuer(self, world: World) -> None:
        bank = make_partner(
            world.services, PartnerRole.CARD_ISSUER, name="Toinen Pankki", namespaces=["toinen"]
        )
        world.enroll()
        other = world.enroll(issuer=bank)
        with world.services.db.session(write=False) as session:
            # Without a namespace the id is ambiguous across issuers.
            assert (
                card_for_token(session, "card-1", "415301******1234", None, sandbox=False) is None
            )
            found = card_for_token(session, "card-1", "415301******1234", "toinen", sandbox=False)
            assert found is not None
            assert str(found.id) == other
            assert (
                card_for_token(session, "card-1", "415301******1234", "nobody", sandbox=False)
                is None
            )

    def test_deleted_cards_never_match(self, world: World) -> None:
        card = world.enroll()
        world.client.delete(f"/api/v1/cards/{card}/", headers=auth(world.issuer.api_key))
        with world.services.db.session(write=False) as session:
            assert (
                card_for_token(session, "card-1", "415301******1234", None, sandbox=False) is None
            )
