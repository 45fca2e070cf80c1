"""Partner-key authentication and its short-lived cache."""

from __future__ import annotations

import pytest
from sqlalchemy.orm import Session

from kuitti.errors import Unauthorized
from kuitti.partners.auth import api_key_from_header, authenticate_partner
from kuitti.partners.cache import PartnerCache
from kuitti.services import Services
from tests.conftest import StatementCounter
from tests.factories import make_partner


@pytest.mark.parametrize(
    ("header", "key"),
    [
        ("Token kt_abc", "kt_abc"),
        ("token   kt_abc ", "kt_abc"),
        ("kt_abc", "kt_abc"),
        ("Bearer kt_abc", None),
        ("Basic a b", None),
        ("", None),
        (None, None),
    ],
)
def test_key_from_header(header: str | None, key: str | None) -> None:
    assert api_key_from_header(header) == key


def test_a_known_key_is_looked_up_once(services: Services, sql: StatementCounter) -> None:
    merchant = make_partner(services)
    with services.db.session(write=False) as session:
        first = authenticate_partner(services, session, f"Token {merchant.api_key}")
    with sql.counting() as statements, services.db.session(write=False) as session:
        again = authenticate_partner(services, session, f"Token {merchant.api_key}")
    assert again.id == first.id == merchant.partner.id
    assert statements == []


def test_a_wrong_key_always_asks_the_database(services: Services, sql: StatementCounter) -> None:
    for _ in range(2):
        with (
            sql.counting() as statements,
            services.db.session(write=False) as session,
            pytest.raises(Unauthorized),
        ):
            authenticate_partner(services, session, "Token kt_wrong")
        assert any("FROM partners" in s for s in statements)


def test_a_refused_request_leaves_the_cached_partner_whole(services: Services) -> None:
    """The partner is read through the request's session, which rolls back when the request
    is refused; the cached copy (used by the next requests) must not expire with it."""
    merchant = make_partner(services, namespaces=["kauppa"])
    with Session(services.db.engine, expire_on_commit=False) as session:
        authenticate_partner(services, session, f"Token {merchant.api_key}")
        session.rollback()  # what the request's session does when the route refuses
    with services.db.session(write=False) as session:
        cached = authenticate_partner(services, session, f"Token {merchant.api_key}")
    assert cached.name == merchant.partner.name
    assert cached.namespace_names == ["kauppa"]


def test_entries_expire_and_the_cache_is_bounded() -> None:
    cache = PartnerCache(ttl_seconds=-1, size=2)
    marker = object()
    cache.put("a", marker)  # type: ignore[arg-type]
    assert cache.get("a") is None  # already expired
    bounded = PartnerCache(size=2)
    for key in ("a", "b", "c"):
        bounded.put(key, marker)  # type: ignore[arg-type]
    assert bounded.get("a") is None
    assert bounded.get("c") is marker
