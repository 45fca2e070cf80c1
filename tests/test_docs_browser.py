"""``/docs`` in Chromium with no internet: it loads, authorises with a merchant key, and posts a
receipt from "Try it out"."""

from __future__ import annotations

import orjson
from playwright.sync_api import Browser, Route
from sqlalchemy import select

from kuitti.models import Receipt
from kuitti.services import Services
from tests.browser import needs_chromium
from tests.conftest import LiveServer
from tests.factories import make_partner, receipt_doc

pytestmark = needs_chromium


def test_docs_post_a_receipt_offline(
    browser: Browser, live_server: LiveServer, services: Services
) -> None:
    merchant = make_partner(services)
    page = browser.new_page()
    outside: list[str] = []

    def only_this_server(route: Route) -> None:
        if route.request.url.startswith(live_server.url):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    page.route("**/*", only_this_server)
    page.goto(f"{live_server.url}/docs")
    page.locator("button.authorize").click()
    scheme = page.locator(".auth-container").filter(has_text="MerchantToken")
    scheme.locator("input").fill(f"Token {merchant.api_key}")
    scheme.locator("button.authorize").click()
    page.locator(".dialog-ux .btn-done").first.click()

    create = page.locator(".opblock-post").filter(has_text="Create a receipt")
    create.locator(".opblock-summary").click()
    create.locator("button.try-out__btn").click()
    create.locator("textarea.body-param__text").fill(orjson.dumps(receipt_doc()).decode())
    create.locator("button.execute").click()
    status = create.locator(".live-responses-table tr.response .response-col_status").first
    status.wait_for()
    assert status.inner_text().strip() == "200"
    assert outside == []
    with services.db.session(write=False) as session:
        stored = session.scalars(select(Receipt)).one()
        assert stored.partner_id == merchant.partner.id
