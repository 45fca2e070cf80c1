"""Each kind of caller finds its partner key in the headers its authenticator names, from the one
parse of ``Authorization`` (``Credentials``)."""

from __future__ import annotations

import pytest

from kuitti.partners.keys import APPS, CARD_ISSUERS, MERCHANTS, READERS, Credentials

BOTH = {"authorization": "Token kt_auth", "service_apikey": "kt_app"}
BEARER = {"authorization": "Bearer user-token", "service-apikey": "kt_app"}


@pytest.mark.parametrize(
    ("headers", "merchant", "reader", "issuer", "app"),
    [
        (BOTH, "kt_auth", "kt_auth", "kt_app", "kt_app"),
        (BEARER, None, "kt_app", "kt_app", "kt_app"),
        ({"authorization": "kt_bare"}, "kt_bare", "kt_bare", "kt_bare", None),
        ({"service_apikey": "kt_app"}, None, "kt_app", "kt_app", "kt_app"),
        (
            {"authorization": "Basic a b", "service_apikey": "kt_app"},
            None,
            None,
            "kt_app",
            "kt_app",
        ),
        ({"authorization": "Bearer user-token"}, None, None, None, None),
        ({}, None, None, None, None),
    ],
)
def test_each_caller_takes_its_key_from_its_headers(
    headers: dict[str, str],
    merchant: str | None,
    reader: str | None,
    issuer: str | None,
    app: str | None,
) -> None:
    credentials = Credentials.of(headers)
    found = [credentials.key(*a.where) for a in (MERCHANTS, READERS, CARD_ISSUERS, APPS)]
    assert found == [merchant, reader, issuer, app]


@pytest.mark.parametrize(
    ("authorization", "bearer"),
    [("Bearer abc", "abc"), ("bearer   abc ", "abc"), ("Bearer", None), ("Token abc", None)],
)
def test_a_bearer_token_is_not_a_key(authorization: str, bearer: str | None) -> None:
    credentials = Credentials(authorization)
    assert credentials.bearer == bearer
    if bearer is not None:
        assert credentials.key(*MERCHANTS.where) is None
