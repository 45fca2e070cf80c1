"""The check of tests/openapi_truth.py: it finds what a document leaves out, and only that."""

from __future__ import annotations

from typing import Any

from tests.openapi_truth import Seen, undeclared

DOCUMENT: dict[str, Any] = {
    "paths": {
        "/r/{token}": {"get": {"operationId": "page", "responses": {"200": {
            "description": "A page", "content": {"text/html": {}}}}}},
        "/r/{token}/pdf": {"get": {"operationId": "pdf", "responses": {
            "200": {"description": "A PDF", "content": {"application/pdf": {}}},
            "4XX": {"$ref": "#/components/responses/Error"}}}},
        "/ns/{namespace}/r/{receipt_path}": {"get": {"operationId": "ns", "responses": {
            "304": {"description": "Not modified"},
            "default": {"description": "Any", "content": {"text/*": {}}}}}},
    },
    "components": {"responses": {"Error": {
        "description": "An error", "content": {"application/json": {}}}}},
}  # fmt: skip


def test_declared_answers_pass() -> None:
    seen = {
        Seen("GET", "/r/abc", 200, "text/html"),
        Seen("GET", "/r/abc/pdf", 200, "application/pdf"),
        Seen("GET", "/r/abc/pdf", 404, "application/json"),  # 4XX, through a reference
        Seen("GET", "/ns/kauppa/r/2026/01/15/a", 304, None),  # a path parameter with slashes
        Seen("GET", "/ns/kauppa/r/x", 500, "text/plain"),  # default
        Seen("POST", "/r/abc", 405, "application/json"),  # an operation it does not describe
        Seen("GET", "/static/site.css", 200, "text/css"),  # a path it does not describe
    }
    assert undeclared(DOCUMENT, seen) == []


def test_a_status_or_media_type_left_out_is_named() -> None:
    seen = [
        Seen("GET", "/r/abc", 404, "text/html"),
        Seen("GET", "/r/abd", 404, "text/html"),  # the same again: one line
        Seen("GET", "/r/abc", 200, "application/json"),
        Seen("GET", "/r/abc/pdf", 404, "text/html"),
        Seen("GET", "/ns/kauppa/r/x", 500, "application/json"),
    ]
    assert undeclared(DOCUMENT, seen) == [
        "GET /ns/{namespace}/r/{receipt_path}: 500 application/json is not declared "
        "(seen on /ns/kauppa/r/x)",
        "GET /r/{token}/pdf: 404 text/html is not declared (seen on /r/abc/pdf)",
        "GET /r/{token}: 200 application/json is not declared (seen on /r/abc)",
        "GET /r/{token}: status 404 is not declared (seen on /r/abc)",
    ]
