"""The account page: connections, receipts, export, deletion; password reset by e-mail."""

from __future__ import annotations

import re
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
from sqlalchemy import func, select

from kuitti import signatures
from kuitti.delivery.mail import send_due_mail
from kuitti.delivery.service import deliver_to_user
from kuitti.models import Connection, PartnerRole, Receipt, User, UserSession, WebhookDelivery
from kuitti.services import Services
from tests.factories import auth, make_partner, make_user, receipt_doc
from tests.oauth.flow import connect, csrf_of, delivered_receipt, log_in, make_app
from tests.receipts.test_posted_bytes import odd_document
from tests.users.conftest import Inbox


def revoke_events(services: Services) -> int:
    with services.db.session(write=False) as session:
        return (
            session.scalar(
                select(func.count())
                .select_from(WebhookDelivery)
                .where(WebhookDelivery.notification_type == "oauth_authorization_revoke")
            )
            or 0
        )


class TestAccountPage:
    def test_needs_login(self, client: httpx.Client, services: Services) -> None:
        answer = client.get("/account")
        assert answer.status_code == 303
        assert answer.headers["location"] == "/login?next=%2Faccount"

    def test_lists_connections_and_receipts(self, client: httpx.Client, services: Services) -> None:
        app = make_app(services, name="Pankki <b>App</b>")
        user = make_user(services, "maija@example.com")
        connect(client, app, "maija@example.com")
        delivered_receipt(client, services, user.id, merchant_name="Lähikauppa")
        page = client.get("/account")
        assert page.status_code == 200
        assert "Pankki &lt;b&gt;App&lt;/b&gt;" in page.text
        assert "Lähikauppa" in page.text or "Kauppa Oy" in page.text
        assert "14,98 EUR" in page.text or "8,49 EUR" in page.text
        assert re.search(r'href="http://127\.0\.0\.1:\d+/r/[^"]+"', page.text)
        assert page.headers["x-frame-options"] == "DENY"

    def test_amounts_have_their_currencys_decimals(
        self, client: httpx.Client, services: Services
    ) -> None:
        user = make_user(services, "maija@example.com")
        merchant = make_partner(services, PartnerRole.MERCHANT)
        doc = receipt_doc(currencyISOCode="JPY")
        answer = client.post("/api/v1/receipts/", json=doc, headers=auth(merchant.api_key))
        assert answer.status_code == 200, answer.text
        with services.db.session() as session:
            receipt = session.get(Receipt, uuid.UUID(answer.json()["receipt_id"]))
            assert receipt is not None
            deliver_to_user(session, receipt, user.id, via="test", now=services.clock.now())
        log_in(client, "maija@example.com")
        page = client.get("/account")
        assert f"{doc['totalPriceIncVAT']:,} JPY".replace(",", "\xa0") in page.text

    def test_removing_a_connection_notifies_the_partner(
        self, client: httpx.Client, services: Services
    ) -> None:
        app = make_app(services, webhook_url="http://127.0.0.1:9/hook")
        make_user(services, "maija@example.com")
        token = connect(client, app, "maija@example.com")
        with services.db.session(write=False) as session:
            connection = session.scalar(select(Connection))
            assert connection is not None
        path = f"/account/connections/{connection.id}/remove"
        assert client.post(path).status_code == 403  # no CSRF token: nothing happens
        assert revoke_events(services) == 0
        page = client.get("/account")
        assert client.post(path, data={"csrf_token": csrf_of(page)}).status_code == 303
        assert revoke_events(services) == 1
        reading = client.get(
            "/api/v1/receipts/",
            headers={"SERVICE_APIKEY": app.api_key, "Authorization": f"Bearer {token}"},
        )
        assert reading.status_code == 401

    def test_someone_elses_connection_cannot_be_removed(
        self, client: httpx.Client, services: Services
    ) -> None:
        app = make_app(services, webhook_url="http://127.0.0.1:9/hook")
        make_user(services, "maija@example.com")
        connect(client, app, "maija@example.com")
        with services.db.session(write=False) as session:
            connection = session.scalar(select(Connection))
            assert connection is not None
        make_user(services, "matti@example.com")
        with httpx.Client(base_url=client.base_url) as other:
            log_in(other, "matti@example.com")
            page = other.get("/account")
            other.post(
                f"/account/connections/{connection.id}/remove",
                data={"csrf_token": csrf_of(page)},
            )
        assert revoke_events(services) == 0

    def test_more_logged_in_posts_at_once_than_the_pool_has_connections(
        self, client: httpx.Client, services: Services
    ) -> None:
        """The login cookie is checked through the request's session, which hands its
        connection back before the route opens its write unit: forty form posts against the
        test pool of twenty never wait for a second connection while holding a first."""
        make_user(services, "maija@example.com")
        log_in(client, "maija@example.com")
        token = csrf_of(client.get("/account"))
        racers = 40
        barrier = threading.Barrier(racers)

        def remove(_: int) -> int:
            with httpx.Client(base_url=client.base_url, cookies=client.cookies, timeout=60) as http:
                barrier.wait()
                path = f"/account/connections/{uuid.uuid4()}/remove"
                return http.post(path, data={"csrf_token": token}).status_code

        with ThreadPoolExecutor(racers) as pool:
            assert list(pool.map(remove, range(racers))) == [303] * racers

    def test_export_holds_everything(self, client: httpx.Client, services: Services) -> None:
        app = make_app(services)
        user = make_user(services, "maija@example.com")
        connect(client, app, "maija@example.com")
        receipt_id = delivered_receipt(client, services, user.id, merchant_name="Lähikauppa")
        answer = client.get("/account/export")
        assert answer.status_code == 200
        assert answer.headers["content-type"] == "application/json"
        assert "attachment" in answer.headers["content-disposition"]
        data = answer.json()
        assert data["user"]["email"] == "maija@example.com"
        assert data["user"]["created_at"] == "2026-01-15T12:00:00Z"  # UTC, written with a Z
        assert [c["partner"] for c in data["connections"]] == ["Pankki App"]
        assert [r["receipt_id"] for r in data["receipts"]] == [receipt_id]
        assert data["receipts"][0]["receipt"]["merchant"]["name"] == "Kauppa Oy"
        assert "password" not in answer.text

    def test_the_export_holds_each_receipt_as_posted_with_its_signature(
        self, client: httpx.Client, services: Services
    ) -> None:
        """The export's ``receipt`` is the posted bytes unchanged (odd whitespace, escapes and
        number forms), and its ``signature`` verifies over exactly them."""
        app = make_app(services)
        user = make_user(services, "maija@example.com")
        connect(client, app, "maija@example.com")  # logged in
        merchant = make_partner(services, PartnerRole.MERCHANT, name="Kauppa Oy")
        posted = b"\t" + odd_document() + b"\r\n"
        answer = client.post(
            "/api/v1/receipts/",
            content=posted,
            headers={**auth(merchant.api_key), "Content-Type": "application/json"},
        )
        assert answer.status_code == 200, answer.text
        with services.db.session() as session:
            receipt = session.get(Receipt, uuid.UUID(answer.json()["receipt_id"]))
            assert receipt is not None
            deliver_to_user(session, receipt, user.id, via="test", now=services.clock.now())
        export = client.get("/account/export")
        assert export.status_code == 200
        assert b'"receipt": ' + posted + b",\n" in export.content
        [exported] = export.json()["receipts"]
        keys = client.get(signatures.JWKS_PATH).json()
        assert signatures.verify(posted, exported["signature"], keys).valid

    def test_deletion_revokes_notifies_and_forgets(
        self, client: httpx.Client, services: Services
    ) -> None:
        first = make_app(services, webhook_url="http://127.0.0.1:9/a")
        second = make_app(services, name="Kulut", webhook_url="http://127.0.0.1:9/b")
        user = make_user(services, "maija@example.com")
        token = connect(client, first, "maija@example.com")
        connect(client, second, "maija@example.com", scope="receipt:write")
        delivered_receipt(client, services, user.id, merchant_name="Lähikauppa")
        page = client.get("/account")
        wrong = client.post(
            "/account/delete", data={"password": "wrong one", "csrf_token": csrf_of(page)}
        )
        assert wrong.status_code == 400
        assert revoke_events(services) == 0
        done = client.post(
            "/account/delete", data={"password": "correct horse 1", "csrf_token": csrf_of(page)}
        )
        assert done.status_code == 200
        assert revoke_events(services) == 2
        with services.db.session(write=False) as session:
            row = session.get(User, user.id)
            assert row is not None
            assert row.deleted_at is not None
            assert "maija" not in row.email
            assert session.scalar(select(func.count()).select_from(UserSession)) == 0
            assert all(not c.active for c in session.scalars(select(Connection)))
        assert client.get("/account").status_code == 303
        assert log_in(client, "maija@example.com").status_code == 400
        reading = client.get(
            "/api/v1/receipts/",
            headers={"SERVICE_APIKEY": first.api_key, "Authorization": f"Bearer {token}"},
        )
        assert reading.status_code == 401
        # The address is free again.
        make_user(services, "maija@example.com")


class TestPasswordReset:
    def test_reset_by_mailed_link(
        self, client: httpx.Client, services: Services, mail_services: Services, inbox: Inbox
    ) -> None:
        make_user(services, "maija@example.com")
        log_in(client, "maija@example.com")
        with httpx.Client(base_url=client.base_url) as anonymous:
            page = anonymous.get("/password-reset")
            for address in ("maija@example.com", "nobody@example.com"):
                answer = anonymous.post(
                    "/password-reset", data={"email": address, "csrf_token": csrf_of(page)}
                )
                assert answer.status_code == 200
                assert "If an account has that address" in answer.text
            assert send_due_mail(mail_services) == 1
            assert inbox.arrived.wait(5)
            assert inbox.messages[0]["To"] == "maija@example.com"
            link = re.search(r"https?://\S+/password-reset/\S+", inbox.text_of())
            assert link is not None
            path = httpx.URL(link.group(0)).raw_path.decode()
            form = anonymous.get(path)
            assert form.status_code == 200
            short = anonymous.post(path, data={"password": "short", "csrf_token": csrf_of(form)})
            assert short.status_code == 400
            done = anonymous.post(
                path, data={"password": "a brand new secret", "csrf_token": csrf_of(form)}
            )
            assert done.status_code == 303
            again = anonymous.post(
                path, data={"password": "another new secret", "csrf_token": csrf_of(form)}
            )
            assert again.status_code == 400  # single use
        # Every session ended; the old password is gone, the new one works.
        assert client.get("/account").status_code == 303
        assert log_in(client, "maija@example.com").status_code == 400
        assert log_in(client, "maija@example.com", "a brand new secret").status_code == 303

    def test_reset_request_needs_csrf(self, client: httpx.Client, services: Services) -> None:
        make_user(services, "maija@example.com")
        client.get("/password-reset")
        answer = client.post("/password-reset", data={"email": "maija@example.com"})
        assert answer.status_code == 403
