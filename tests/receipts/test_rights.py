"""A partner's right to a receipt that reached it through a connection or a card ends with it.

Each way a consent ends — the partner revokes the token, the user removes the connection on the
membership page, the user deletes the account, the issuer removes the card — cuts the partner
key's single read (404, like a missing receipt) and its list at once, while what the partner
posted itself stays readable.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import httpx
import pytest

from kuitti.clock import FrozenClock
from kuitti.delivery.service import deliver_to_user
from kuitti.models import PartnerRole, Receipt
from kuitti.partners.service import NewPartner
from kuitti.services import Services
from tests.cards.support import AUTH_CODE, PAID_AT, World, make_world
from tests.factories import auth, make_partner, make_user, receipt_doc
from tests.oauth.flow import (
    REDIRECT_URI,
    auth_params,
    code_from,
    connect,
    consent,
    csrf_of,
    delivered_receipt,
    exchange,
    log_in,
    make_app,
)

LIST = "/api/v1/receipts/"


def reads(client: httpx.Client, partner: NewPartner, receipt_id: str) -> bool:
    """True when the partner's key reads the receipt and lists it; False when it does neither.
    The single read and the list must agree."""
    single = client.get(f"{LIST}{receipt_id}/service_json/", headers=auth(partner.api_key))
    listed = client.get(LIST, headers=auth(partner.api_key))
    assert single.status_code in (200, 404), single.text
    assert listed.status_code == 200, listed.text
    in_list = receipt_id in [r["receipt_id"] for r in listed.json()["receipts"]]
    assert (single.status_code == 200) == in_list
    if single.status_code == 404:
        assert single.json()["error"] == "not_found"
    return in_list


class TestConnection:
    def test_revoked_through_the_api(self, client: httpx.Client, services: Services) -> None:
        app = make_app(services)
        user = make_user(services, "maija@example.com")
        token = connect(client, app, "maija@example.com")
        receipt_id = delivered_receipt(client, services, user.id)
        assert reads(client, app, receipt_id)
        answer = client.delete("/api/oauth/revoke", headers={"Authorization": f"Bearer {token}"})
        assert answer.status_code == 200
        assert not reads(client, app, receipt_id)

    def test_removed_on_the_membership_page(self, client: httpx.Client, services: Services) -> None:
        app = make_app(services)
        user = make_user(services, "maija@example.com")
        log_in(client, "maija@example.com")
        code, _ = code_from(consent(client, auth_params(app)))
        service_id = exchange(client, app, code).json()["service_id"]
        receipt_id = delivered_receipt(client, services, user.id)
        assert reads(client, app, receipt_id)
        params = {"service_id": service_id, "redirect_uri": REDIRECT_URI}
        page = client.get("/membership", params=params)
        assert page.status_code == 200, page.text
        answer = client.post(
            "/membership", data={**params, "action": "remove", "csrf_token": csrf_of(page)}
        )
        assert answer.status_code == 303, answer.text
        assert not reads(client, app, receipt_id)

    def test_account_deleted(self, client: httpx.Client, services: Services) -> None:
        app = make_app(services)
        user = make_user(services, "maija@example.com")
        connect(client, app, "maija@example.com")
        receipt_id = delivered_receipt(client, services, user.id)
        assert reads(client, app, receipt_id)
        page = client.get("/account")
        done = client.post(
            "/account/delete", data={"password": "correct horse 1", "csrf_token": csrf_of(page)}
        )
        assert done.status_code == 200, done.text
        assert not reads(client, app, receipt_id)

    def test_another_users_connection_still_holds(
        self, client: httpx.Client, services: Services
    ) -> None:
        """One receipt reached the partner through two users; one of them leaving ends only
        their way in."""
        app = make_app(services)
        first = make_user(services, "maija@example.com")
        second = make_user(services, "matti@example.com")
        token = connect(client, app, "maija@example.com")
        client.cookies.clear()
        connect(client, app, "matti@example.com")
        receipt_id = delivered_receipt(client, services, first.id)
        delivered_to_both = delivered_receipt(client, services, first.id, merchant_name="Toinen")
        with services.db.session() as session:
            receipt = session.get(Receipt, uuid.UUID(delivered_to_both))
            assert receipt is not None
            deliver_to_user(session, receipt, second.id, via="test", now=services.clock.now())
        client.delete("/api/oauth/revoke", headers={"Authorization": f"Bearer {token}"})
        assert not reads(client, app, receipt_id)
        assert reads(client, app, delivered_to_both)

    def test_what_the_partner_posted_stays(self, client: httpx.Client, services: Services) -> None:
        shop = make_partner(
            services,
            PartnerRole.APP,
            PartnerRole.MERCHANT,
            name="Kauppa ja sovellus",
            redirect_uris=[REDIRECT_URI],
        )
        user = make_user(services, "maija@example.com")
        token = connect(client, shop, "maija@example.com")
        posted = client.post(LIST, json=receipt_doc(), headers=auth(shop.api_key))
        assert posted.status_code == 200, posted.text
        receipt_id = posted.json()["receipt_id"]
        delivered = delivered_receipt(client, services, user.id)
        client.delete("/api/oauth/revoke", headers={"Authorization": f"Bearer {token}"})
        assert reads(client, shop, receipt_id)
        assert not reads(client, shop, delivered)


class TestCard:
    @pytest.fixture
    def world(self, services: Services, client: httpx.Client, clock: FrozenClock) -> World:
        return make_world(services, client, clock)

    def test_removed_card(self, world: World) -> None:
        card = world.enroll()
        world.transaction(authorization_code=AUTH_CODE)
        receipt_id = world.receipt()
        assert world.matched_card(receipt_id) == card
        assert reads(world.client, world.issuer, receipt_id)
        answer = world.client.delete(f"/api/v1/cards/{card}/", headers=auth(world.issuer.api_key))
        assert answer.status_code == 200
        assert not reads(world.client, world.issuer, receipt_id)
        assert reads(world.client, world.merchant, receipt_id)

    def test_card_holder_deleted_the_account(self, world: World) -> None:
        world.enroll()
        world.transaction(authorization_code=AUTH_CODE)
        receipt_id = world.receipt()
        assert reads(world.client, world.issuer, receipt_id)
        log_in(world.client, "maija@example.com")
        page = world.client.get("/account")
        done = world.client.post(
            "/account/delete", data={"password": "correct horse 1", "csrf_token": csrf_of(page)}
        )
        assert done.status_code == 200, done.text
        assert not reads(world.client, world.issuer, receipt_id)

    def test_a_pilot_card_keeps_its_receipts(self, world: World) -> None:
        bank = world.pilot_bank()
        world.clock.set(PAID_AT + timedelta(minutes=20))
        receipt_id = world.receipt()
        assert bank.partner.id in world.readers(receipt_id)
        assert reads(world.client, bank, receipt_id)
