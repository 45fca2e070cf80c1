from __future__ import annotations

import httpx

from kuitti.deps import Services
from tests.factories import auth, make_partner, receipt_doc


def test_post_and_read_back(client: httpx.Client, services: Services) -> None:
    merchant = make_partner(services)
    doc = receipt_doc()
    created = client.post("/api/v1/receipts/", json=doc, headers=auth(merchant.api_key))
    assert created.status_code == 200, created.text
    receipt_id = created.json()["receipt_id"]
    read = client.get(
        f"/api/v1/receipts/{receipt_id}/service_json/", headers={"Authorization": merchant.api_key}
    )
    assert read.status_code == 200
    assert read.json() == doc
