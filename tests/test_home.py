"""``GET /``: the page a newcomer lands on links every place to go next, and each link works."""

from __future__ import annotations

import re

import httpx


def test_home_links_the_docs_and_health_endpoints(client: httpx.Client) -> None:
    page = client.get("/")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    links = re.findall(r'href="(/[^"]*)"', page.text)
    for wanted in ("/docs", "/openapi.json", "/healthz", "/readyz", "/metrics", "/login"):
        assert wanted in links
    for link in links:
        assert client.get(link, follow_redirects=True).status_code == 200, link
    assert "docs/api.md" in page.text
