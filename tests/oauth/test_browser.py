"""The consent flow in a real browser (Debian chromium through Playwright): log in, consent,
return to the partner with the code; a screenshot of the consent page under test-artifacts/."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
from playwright.sync_api import Browser, Route

from kuitti.services import Services
from tests.browser import needs_chromium
from tests.conftest import LiveServer
from tests.factories import make_user
from tests.oauth.flow import REDIRECT_URI, auth_params, exchange, make_app, state_of

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"

pytestmark = needs_chromium


class TestConsentInBrowser:
    def test_login_consent_and_return_with_a_code(
        self, browser: Browser, live_server: LiveServer, services: Services, client: httpx.Client
    ) -> None:
        app = make_app(services, name="Pankki App")
        make_user(services, "maija@example.com")
        state = state_of("Yhdistä kuittisi Pankki Appiin <b>nyt</b>", customer="c-1")
        params = auth_params(app, "receipt:read receipt:write", state)
        url = f"{live_server.url}/auth?{urlencode(params)}"
        returned: list[str] = []

        def partner_callback(route: Route) -> None:
            returned.append(route.request.url)
            route.fulfill(status=200, content_type="text/plain", body="partner got it")

        context = browser.new_context(viewport={"width": 420, "height": 900})
        page = context.new_page()
        page.route("https://bank.example/**", partner_callback)
        page.goto(url)
        assert page.locator("h1").inner_text().startswith("Log in to connect Pankki App")
        page.fill("#email", "maija@example.com")
        page.fill("#password", "correct horse 1")
        page.click("button[name=action][value=login]")
        page.wait_for_selector("button[name=decision][value=approve]")
        assert "Connect Pankki App" in page.locator("h1").inner_text()
        message = page.locator("blockquote.partner-message").inner_text()
        assert message == "Yhdistä kuittisi Pankki Appiin <b>nyt</b>"  # shown as text
        scopes = page.locator("ul.scopes").inner_text()
        assert "read the receipts" in scopes
        assert "send receipts" in scopes
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "oauth-consent.png"), full_page=True)
        assert (ARTIFACTS / "oauth-consent.png").stat().st_size > 5000
        cookies = {c["name"]: c for c in context.cookies()}
        assert cookies["kuitti_session"]["httpOnly"]
        assert cookies["kuitti_session"]["sameSite"] == "Lax"

        page.click("button[name=decision][value=approve]")
        page.wait_for_url(f"{REDIRECT_URI}**")
        assert page.locator("body").inner_text() == "partner got it"
        assert len(returned) == 1
        query = parse_qs(urlsplit(returned[0]).query)
        assert query["state"] == [state]
        token = exchange(client, app, query["code"][0])
        assert token.status_code == 200
        assert token.json()["scope"] == "receipt:read receipt:write"
        context.close()

    def test_the_consent_page_refuses_to_be_framed(
        self, browser: Browser, live_server: LiveServer, services: Services
    ) -> None:
        app = make_app(services)
        context = browser.new_context()
        page = context.new_page()
        target = f"{live_server.url}/auth?{urlencode(auth_params(app))}"
        framing = f"<html><body><iframe id='f' src='{target}'></iframe></body></html>"

        def evil(route: Route) -> None:
            route.fulfill(status=200, content_type="text/html", body=framing)

        page.route("https://evil.example/**", evil)
        page.goto("https://evil.example/")
        frame = page.frame_locator("#f")
        # The browser blocks the framed page: nothing of the login form renders inside.
        assert frame.locator("#email").count() == 0
        # Control: the same address at the top level shows the form.
        page.goto(target)
        assert page.locator("#email").count() == 1
        context.close()

    def test_sign_up_from_the_consent_page_then_deny(
        self, browser: Browser, live_server: LiveServer, services: Services
    ) -> None:
        app = make_app(services)
        returned: list[str] = []

        def partner_callback(route: Route) -> None:
            returned.append(route.request.url)
            route.fulfill(status=200, content_type="text/plain", body="partner got it")

        context = browser.new_context()
        page = context.new_page()
        page.route("https://bank.example/**", partner_callback)
        page.goto(f"{live_server.url}/auth?{urlencode(auth_params(app, state='s-9'))}")
        page.fill("#email", "uusi@example.com")
        page.fill("#password", "a new password")
        page.click("button[name=action][value=signup]")
        page.wait_for_selector("button[name=decision][value=deny]")
        assert "uusi@example.com" in page.locator("main").inner_text()
        page.click("button[name=decision][value=deny]")
        page.wait_for_url(f"{REDIRECT_URI}**")
        query = parse_qs(urlsplit(returned[0]).query)
        assert query == {"error": ["access_denied"], "state": ["s-9"]}
        context.close()
