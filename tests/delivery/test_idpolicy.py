"""A namespace's receipt identifier policy (docs/delivery.md, "Identifier policies"): set by the
operator with ``kuitti partner update --id-policy``, enforced on the post and the dry run alike."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from kuitti.partners.idpolicy import parse_policy, policy_text
from kuitti.partners.service import NewPartner
from kuitti.services import Services
from tests.delivery.support import make_merchant
from tests.factories import auth, receipt_doc, token_body
from tests.test_cli import run, run_json

RANDOM_ID = "q3Zr8Kd0_Lx-Vb2Tn7Ws1A"  # 22 base64url characters, as a till would draw them
POLICY = "min-length=16,alphabet=base64url"


def body(identifier: str, namespace: str = "kauppa") -> dict[str, Any]:
    return token_body(
        receipt_doc(),
        {"type": "EMAIL", "value": "x@example.com"},
        {"type": "RECEIPT_ID", "value": identifier, "namespace": namespace},
    )


def post(client: httpx.Client, merchant: NewPartner, identifier: str, **kw: str) -> httpx.Response:
    return client.post(
        "/api/v1/receipts/", json=body(identifier, **kw), headers=auth(merchant.api_key)
    )


def dry_run(client: httpx.Client, merchant: NewPartner, identifier: str) -> httpx.Response:
    return client.post(
        "/api/v1/receipts/validate", json=body(identifier), headers=auth(merchant.api_key)
    )


@pytest.fixture
def merchant(services: Services) -> NewPartner:
    return make_merchant(services, namespaces=["kauppa", "kauppa-2"])


class TestIdPolicy:
    def test_a_weak_identifier_is_refused_on_the_post_and_the_dry_run(
        self, client: httpx.Client, services: Services, merchant: NewPartner
    ) -> None:
        # Before the policy, a counted identifier is taken (and the key holder is remembered).
        assert post(client, merchant, "till-1-0001").status_code == 200
        pid = str(merchant.partner.id)
        data = run_json(services, "partner", "update", pid, "--id-policy", f"kauppa:{POLICY}")
        assert data["id_policies"] == {"kauppa": POLICY}
        expected = {
            "error": "invalid_token",
            "decription": "attributes.tokens[1].value: namespace 'kauppa' takes receipt "
            "identifiers of at least 16 characters and only the characters A-Z, a-z, 0-9, - "
            "and _ (RFC 4648) (drawn at random, so they cannot be guessed).",
        }
        for weak in ("till-1-0002", "till-1-0002-0000-0001.x"):
            for response in (post(client, merchant, weak), dry_run(client, merchant, weak)):
                assert response.status_code == 400, response.text
                assert response.json() == expected
        assert client.get("/ns/kauppa/r/till-1-0002").status_code == 404
        assert post(client, merchant, RANDOM_ID).status_code == 200
        assert dry_run(client, merchant, "ANOTHER" + RANDOM_ID).json()["valid"] is True
        # Another namespace of the same merchant has no policy.
        assert post(client, merchant, "till-1-0003", namespace="kauppa-2").status_code == 200

    def test_none_removes_the_policy(
        self, client: httpx.Client, services: Services, merchant: NewPartner
    ) -> None:
        pid = str(merchant.partner.id)
        run_json(services, "partner", "update", pid, "--id-policy", "kauppa:alphabet=hex")
        assert post(client, merchant, "ABCDEF0123").status_code == 200
        assert post(client, merchant, "till-1").status_code == 400
        data = run_json(services, "partner", "update", pid, "--id-policy", "kauppa:none")
        assert data["id_policies"] == {}
        assert post(client, merchant, "till-1").status_code == 200

    @pytest.mark.parametrize(
        ("spec", "message"),
        [
            ("kauppa:min-length=abc", "write min-length=N"),
            ("kauppa:min-length=0", "between 1 and 200"),
            ("kauppa:alphabet=emoji", "write min-length=N"),
            ("muualla:min-length=16", "one of this partner's namespaces"),
            ("kauppa", "write NAMESPACE:POLICY"),
        ],
    )
    def test_a_bad_policy_changes_nothing(
        self, services: Services, merchant: NewPartner, spec: str, message: str
    ) -> None:
        pid = str(merchant.partner.id)
        result = run(services, "partner", "update", pid, "--name", "Uusi", "--id-policy", spec)
        assert result.exit_code == 2
        assert message in result.output
        listed = run_json(services, "partner", "show", pid)
        assert listed["name"] == "Kauppa Oy"
        assert listed["id_policies"] == {}


class TestPolicyText:
    @pytest.mark.parametrize("text", ["min-length=22", "alphabet=hex", POLICY])
    def test_reads_back_as_written(self, text: str) -> None:
        policy = parse_policy("kauppa", text)
        assert policy is not None
        assert policy_text(policy) == text
