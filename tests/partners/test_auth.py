"""Partner-key authentication."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import event

from kuitti.errors import Unauthorized
from kuitti.partners.auth import api_key_from_header, authenticate_partner
from kuitti.services import Services


@contextmanager
def counted_statements(services: Services) -> Iterator[list[str]]:
    statements: list[str] = []

    def count(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        statements.append(statement)

    event.listen(services.db.engine, "before_cursor_execute", count)
    try:
        yield statements
    finally:
        event.remove(services.db.engine, "before_cursor_execute", count)


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


def test_a_wrong_key_always_asks_the_database(services: Services) -> None:
    for _ in range(2):
        with (
            counted_statements(services) as statements,
            services.db.session(write=False) as session,
            pytest.raises(Unauthorized),
        ):
            authenticate_partner(services, session, "Token kt_wrong")
        assert any("FROM partners" in s for s in statements)
