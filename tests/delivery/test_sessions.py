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


class Checkouts(list[object]):
    """The connections taken from the pool meanwhile, the live server's included, and the
    most held at once."""

    held = 0
    most_held = 0


@contextmanager
def checkouts(services: Services) -> Iterator[Checkouts]:
    taken = Checkouts()

    def out(connection: object, *_args: object) -> None:
        taken.append(connection)
        taken.held += 1
        taken.most_held = max(taken.most_held, taken.held)

    def back(*_args: object) -> None:
        taken.held -= 1

    event.listen(services.db.engine, "checkout", out)
    event.listen(services.db.engine, "checkin", back)
    try:
        yield taken
    finally:
        event.remove(services.db.engine, "checkout", out)
        event.remove(services.db.engine, "checkin", back)


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
    """The login cookie is checked first and its connection handed back before the page
    reads (``deps.release_connection``): one session, never two connections at once."""
    path = link_page(client, merchant)
    log_in(client, user.email)
    for address, connections in ((path, 2), (f"{path}/pdf", 1)):
        with checkouts(services) as taken:
            answer = client.get(address)
        assert answer.status_code == 200
        assert (len(taken), taken.most_held) == (connections, 1), address
