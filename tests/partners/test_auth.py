"""Partner-key authentication."""

from __future__ import annotations

import pytest

from kuitti.errors import Unauthorized
from kuitti.partners.keys import api_key_from_header, key_holder
from kuitti.services import Services
from tests.conftest import StatementCounter


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


def test_a_wrong_key_always_asks_the_database(services: Services, sql: StatementCounter) -> None:
    for _ in range(2):
        with (
            sql.counting() as statements,
            services.db.session(write=False) as session,
            pytest.raises(Unauthorized),
        ):
            key_holder(session, "Token kt_wrong")
        assert any("FROM partners" in s for s in statements)
