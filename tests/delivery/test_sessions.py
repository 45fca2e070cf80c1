"""The unit-of-work rule (``kuitti/deps.py``) on the link pages: a view reads through the
request's one session, whoever looks and whatever is shown."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

import httpx
from sqlalchemy import event

from kuitti.models import User
from kuitti.partners.service import NewPartner
from kuitti.services import Services
from tests.delivery.support import post_receipt
from tests.factories import receipt_doc, token_body
from tests.oauth.flow import log_in


@contextmanager
def checkouts(services: Services) -> Iterator[list[object]]:
    """The connections taken from the pool meanwhile (one per session that touched the
    database), the live server's included."""
    taken: list[object] = []

    def count(connection: object, *_args: object) -> None:
        taken.append(connection)

    event.listen(services.db.engine, "checkout", count)
    try:
        yield taken
    finally:
        event.remove(services.db.engine, "checkout", count)


def link_page(client: httpx.Client, merchant: NewPartner) -> str:
    body = token_body(receipt_doc(), {"type": "RECEIPT_ID", "value": "L-1", "namespace": "kauppa"})
    answer = post_receipt(client, merchant, body)
    assert answer.status_code == 200, answer.text
    url: str = answer.json()["receipt_web_url"]
    return urlsplit(url).path


def test_a_link_page_reads_through_one_session(
    client: httpx.Client, services: Services, merchant: NewPartner
) -> None:
    path = link_page(client, merchant)
    with checkouts(services) as taken:
        page = client.get(path)
    assert page.status_code == 200
    assert len(taken) == 1


def test_with_a_logged_in_reader_and_for_the_pdf_too(
    client: httpx.Client, services: Services, merchant: NewPartner, user: User
) -> None:
    path = link_page(client, merchant)
    log_in(client, user.email)
    for address in (path, f"{path}/pdf"):
        with checkouts(services) as taken:
            answer = client.get(address)
        assert answer.status_code == 200
        assert len(taken) == 1, address
