"""Statuses every operation of the OpenAPI document lists, because any request can meet them: a
fuzzing run (``bench/schemathesis_run.py``) found page routes answering 400 and 404 the document
did not list, and any request but a health check can be shed (503, ``kuitti.edge``)."""

from __future__ import annotations

import httpx

from kuitti.admission import ALWAYS_ADMITTED

METHODS = {"get", "post", "put", "patch", "delete"}


def test_every_operation_lists_bad_input_a_missing_identifier_and_being_busy(
    client: httpx.Client,
) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    missing = []
    for path, operations in paths.items():
        for method, operation in operations.items():
            if method not in METHODS:
                continue
            expected = {"400"} | ({"404"} if "{" in path else set())
            expected |= set() if path in ALWAYS_ADMITTED else {"503"}
            if not expected <= set(operation["responses"]):
                missing.append((method, path, sorted(expected - set(operation["responses"]))))
    assert missing == []
    assert "/r/{token}" in paths
    assert "503" not in paths["/healthz"]["get"]["responses"]
