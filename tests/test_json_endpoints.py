"""A derandomized Hypothesis pass over every JSON endpoint: whatever the body, path or query,
the answer is never a 5xx, and an error has the interface's shape. It runs on the suite's
database, PostgreSQL included, with a fixed seed and a bounded number of examples."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kuitti.models import PartnerRole
from kuitti.services import Services
from tests.factories import auth, make_partner

EXAMPLES = 40

text = st.text(max_size=30) | st.sampled_from(["a\x00b", "\ud800", "x\udfffy", "", "2028-12"])
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | text
)
values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(text, children, max_size=3),
    max_leaves=8,
)

CARD_FIELDS = ["partner_card_id", "masked_pan", "exp_date", "name"]
TRANSACTION_FIELDS = [
    "partner_card_id",
    "service_card_id",
    "transaction_type",
    "amount",
    "currency",
    "timestamp",
    "merchant_id",
    "merchant_name",
    "reference_number",
    "authorization_code",
]
TOKEN_FIELDS = ["grant_type", "code", "redirect_uri", "client_id", "client_secret", "code_verifier"]


def objects(fields: list[str]) -> st.SearchStrategy[Any]:
    """Mostly objects with the endpoint's own keys, sometimes anything at all."""
    return st.dictionaries(st.sampled_from(fields) | text, values, max_size=len(fields)) | values


SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def assert_handled(response: httpx.Response) -> None:
    assert response.status_code < 500, response.text
    if response.status_code >= 400 and response.headers["content-type"].startswith(
        "application/json"
    ):
        body = response.json()
        for error in body if isinstance(body, list) else [body]:
            assert {"error", "decription"} <= set(error)


def post_json(client: httpx.Client, path: str, body: Any, key: str) -> httpx.Response:
    return client.post(
        path,
        content=json.dumps(body).encode(),
        headers={**auth(key), "Content-Type": "application/json"},
    )


def test_card_and_transaction_bodies(client: httpx.Client, services: Services) -> None:
    issuer = make_partner(services, PartnerRole.CARD_ISSUER)

    @SETTINGS
    @given(card=objects(CARD_FIELDS), transaction=objects(TRANSACTION_FIELDS))
    def check(card: Any, transaction: Any) -> None:
        assert_handled(post_json(client, "/api/v1/cards/", card, issuer.api_key))
        assert_handled(post_json(client, "/api/v1/card-transactions/", transaction, issuer.api_key))

    check()


def test_token_endpoint_bodies(client: httpx.Client, services: Services) -> None:
    app = make_partner(services, PartnerRole.APP, redirect_uris=["https://app.example/cb"])

    @SETTINGS
    @given(body=objects(TOKEN_FIELDS), form=st.dictionaries(st.sampled_from(TOKEN_FIELDS), text))
    def check(body: Any, form: dict[str, str]) -> None:
        assert_handled(
            client.post(
                "/api/oauth/token",
                content=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"},
            )
        )
        assert_handled(
            client.post(
                "/api/oauth/token",
                content="&".join(
                    f"{quote(k)}={quote(v.encode('utf-8', 'surrogatepass'))}"
                    for k, v in form.items()
                ),
                headers={"Content-Type": "application/x-www-form-urlencoded"},
                auth=(app.partner.client_id or "", "secret"),
            )
        )

    check()


def test_paths_and_queries(client: httpx.Client, services: Services) -> None:
    merchant = make_partner(services, PartnerRole.MERCHANT, PartnerRole.CARD_ISSUER)

    def part(value: str) -> str:
        return quote(value.encode("utf-8", "surrogatepass"), safe="")

    @SETTINGS
    @given(segment=text, fmt=text, since=text, limit=text, cursor=text)
    def check(segment: str, fmt: str, since: str, limit: str, cursor: str) -> None:
        headers = auth(merchant.api_key)
        p = part(segment) or "x"
        assert_handled(client.get(f"/api/v1/receipts/{p}/{part(fmt) or 'x'}/", headers=headers))
        assert_handled(
            client.get(
                f"/api/v1/receipts/?since={part(since)}&limit={part(limit)}&cursor={part(cursor)}",
                headers=headers,
            )
        )
        assert_handled(client.delete(f"/api/v1/cards/{p}/", headers=headers))
        assert_handled(
            client.post(
                "/api/v1/qr-codes/",
                headers={
                    "SERVICE_APIKEY": segment[:0] + merchant.api_key,
                    "Authorization": f"Bearer {p}",
                },
            )
        )

    check()
