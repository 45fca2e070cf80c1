"""The OpenAPI document as a partner needs it: how to authenticate each operation, one error shape
on every 4xx, the receipt schemas, no 422 (the service answers bad input with 400), and every
webhook kuitti sends (OpenAPI 3.1 ``webhooks``: one entry per body, its schema in
``components``, and their union ``WebhookPayload``).

``/docs`` (Swagger UI) reads this: its "Authorize" button fills the schemes below, which is how a
"Try it out" call carries a key. Header parameters that a scheme covers are dropped from the
operations, since Swagger UI would not send an ``Authorization`` parameter anyway.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.openapi.utils import get_openapi
from pydantic import TypeAdapter
from starlette.responses import HTMLResponse
from starlette.routing import BaseRoute
from starlette.staticfiles import StaticFiles

from kuitti.admission import ALWAYS_ADMITTED
from kuitti.receipts.formats.layout import Layout
from kuitti.receipts.schema import Receipt, TokenReceiptRequest
from kuitti.webhooks.payloads import PAYLOAD_MODELS, Notification

SECURITY_SCHEMES: dict[str, dict[str, str]] = {
    "MerchantToken": {
        "type": "apiKey",
        "in": "header",
        "name": "Authorization",
        "description": "A merchant creating receipts: `Token <api_key>` (type the word Token, a "
        "space and the key).",
    },
    "PartnerKey": {
        "type": "apiKey",
        "in": "header",
        "name": "Authorization",
        "description": "A partner reading what it may see, or a card issuer: the API key itself.",
    },
    "ServiceApiKey": {
        "type": "apiKey",
        "in": "header",
        "name": "SERVICE_APIKEY",
        "description": "An app acting for a user: its API key, together with the user's Bearer "
        "token (also accepted as `Service-Apikey`).",
    },
    "Bearer": {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "JWT",
        "description": "A user's OAuth access token.",
    },
    "ClientBasic": {
        "type": "http",
        "scheme": "basic",
        "description": "OAuth client id and secret (or send them in the body).",
    },
}

_APP_FOR_USER: dict[str, list[str]] = {"ServiceApiKey": [], "Bearer": []}
# Which schemes each operation accepts (any one entry of the list).
SECURITY: dict[tuple[str, str], list[dict[str, list[str]]]] = {
    ("post", "/api/v1/receipts/"): [{"MerchantToken": []}],
    ("post", "/api/v1/receipts/validate"): [{"MerchantToken": []}],
    ("get", "/api/v1/receipts/"): [{"PartnerKey": []}, _APP_FOR_USER],
    ("get", "/api/v1/receipts/{receipt_id}/{data_format}/"): [{"PartnerKey": []}, _APP_FOR_USER],
    ("post", "/api/v1/qr-codes/"): [_APP_FOR_USER],
    ("post", "/api/oauth/token"): [{"ClientBasic": []}, {}],
    ("delete", "/api/oauth/revoke"): [{"Bearer": []}, _APP_FOR_USER],
    ("post", "/api/v1/cards/"): [{"PartnerKey": []}],
    ("delete", "/api/v1/cards/{service_card_id}/"): [{"PartnerKey": []}],
    ("post", "/api/v1/card-transactions/"): [{"PartnerKey": []}],
}
_COVERED_HEADERS = {"authorization", "service_apikey", "service-apikey", "content-type"}

ERROR_SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "title": "Error",
        "description": "Every error: a code and a text (the interface spells the field "
        "`decription`).",
        "properties": {
            "error": {"type": "string", "examples": ["invalid_value"]},
            "decription": {"type": "string", "examples": ["currencyISOCode: must be ISO 4217."]},
        },
        "required": ["error", "decription"],
    },
    "Errors": {
        "description": "One error, or a list when a request has several faults.",
        "oneOf": [
            {"$ref": "#/components/schemas/Error"},
            {"type": "array", "items": {"$ref": "#/components/schemas/Error"}},
        ],
    },
}
_ERROR_CONTENT = {"application/json": {"schema": {"$ref": "#/components/schemas/Errors"}}}


def _edge_answer(description: str) -> dict[str, Any]:
    return {"description": description, "content": _ERROR_CONTENT}


# What the edge answers before any route runs, whatever the path (docs/api.md, "Statuses any
# request can get"): declared once here, and referenced from every operation but the 405, which
# answers a method a path does not take, so no operation of the document.
EDGE_RESPONSES: dict[str, tuple[int, dict[str, Any]]] = {
    "RequestTimeout": (
        408,
        _edge_answer("The request's headers or body took too long to arrive (closed)."),
    ),
    "PayloadTooLarge": (413, _edge_answer("The body is larger than KUITTI_MAX_BODY_BYTES.")),
    "HeadersTooLarge": (
        431,
        _edge_answer("The request line and headers are larger than KUITTI_MAX_HEADER_BYTES."),
    ),
    "Overloaded": (
        503,
        _edge_answer(
            "Busier than the process can serve, or the database is away: nothing was done; "
            "try again after Retry-After seconds."
        ),
    ),
    "InternalError": (
        500,
        _edge_answer(
            "An unexpected failure (`internal_error`): nothing of the request was kept; the "
            "log has it under the request id."
        ),
    ),
    "MethodNotAllowed": (
        405,
        _edge_answer("The path does not take this method; Allow lists the ones it takes."),
    ),
}
_EDGE_REFERENCED = [(name, status) for name, (status, _) in EDGE_RESPONSES.items() if status != 405]

TOKEN_REQUEST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "grant_type": {"type": "string", "enum": ["authorization_code"]},
        "code": {"type": "string", "description": "From the redirect; valid 60 s, once."},
        "redirect_uri": {"type": "string", "description": "The same one sent to /auth."},
        "client_id": {"type": "string"},
        "client_secret": {"type": "string", "description": "Or HTTP Basic, not both."},
        "code_verifier": {"type": "string", "description": "PKCE, when /auth had a challenge."},
    },
    "required": ["grant_type", "code", "redirect_uri"],
}

# What every webhook call carries besides its body (docs/webhooks.md, "Checking a webhook").
_WEBHOOK_HEADERS: list[dict[str, Any]] = [
    {
        "name": "Authorization",
        "in": "header",
        "required": True,
        "description": "`Token <webhook_key>`; to a card issuer the bare key.",
        "schema": {"type": "string"},
    },
    {
        "name": "webhook-id",
        "in": "header",
        "required": True,
        "description": "The event's id, the same on every retry: process each id once.",
        "schema": {"type": "string"},
    },
    {
        "name": "webhook-timestamp",
        "in": "header",
        "required": True,
        "description": "Seconds since the epoch, when this attempt was signed.",
        "schema": {"type": "string"},
    },
    {
        "name": "webhook-signature",
        "in": "header",
        "required": True,
        "description": "Standard Webhooks signature: `v1,` and Base64 of HMAC-SHA256 over "
        "`<webhook-id>.<webhook-timestamp>.<body>` with the webhook key.",
        "schema": {"type": "string"},
    },
]


def _swagger_ui_assets() -> Path:
    """Swagger UI's files as the swagger-ui-py package ships them (found without importing it:
    its package imports handlers for other web frameworks)."""
    spec = importlib.util.find_spec("swagger_ui")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("swagger-ui-py is not installed: run scripts/bootstrap")
    return Path(spec.submodule_search_locations[0]) / "static"


def add_docs(app: FastAPI) -> None:
    """``/docs`` with Swagger UI served from this server, so it works without the internet
    (FastAPI's own page loads it from a CDN)."""
    app.mount("/docs-assets", StaticFiles(directory=_swagger_ui_assets()), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title=f"{app.title} API",
            swagger_js_url="/docs-assets/swagger-ui-bundle.js",
            swagger_css_url="/docs-assets/swagger-ui.css",
            swagger_favicon_url="/docs-assets/favicon-32x32.png",
            swagger_ui_parameters={"persistAuthorization": False},
        )


def build_openapi(app: FastAPI, documented: Sequence[BaseRoute] = ()) -> dict[str, Any]:
    """The document of ``app``'s routes and of the ``documented`` operations it answers in front
    of FastAPI (``kuitti.front``), which come first."""
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(
        title=app.title, version=app.version, summary=app.summary, routes=[*documented, *app.routes]
    )
    components = schema.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    for model in (Receipt, TokenReceiptRequest):
        model_schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(model_schema.pop("$defs", {}))
        schemas[model.__name__] = model_schema
    # ``?layout=`` of the receipt read, whose route checks its parameters itself.
    schemas["Layout"] = TypeAdapter(Layout).json_schema()
    schemas.pop("HTTPValidationError", None)
    schemas.pop("ValidationError", None)
    schemas.update(ERROR_SCHEMAS)
    components["securitySchemes"] = SECURITY_SCHEMES
    components["responses"] = {name: answer for name, (_, answer) in EDGE_RESPONSES.items()}
    schema["webhooks"] = _webhooks(schemas)
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            _shape_operation(method, path, operation)
    app.openapi_schema = schema
    return schema


def _webhooks(schemas: dict[str, Any]) -> dict[str, Any]:
    """One entry per webhook body; each body's schema, and ``WebhookPayload``, their union, go
    to ``schemas``."""
    webhooks: dict[str, Any] = {}
    for model in PAYLOAD_MODELS:
        model_schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(model_schema.pop("$defs", {}))
        model_schema["description"] = _markdown(model_schema["description"])
        schemas[model.__name__] = model_schema
        webhooks[str(model.WEBHOOK_NAME)] = {"post": _webhook_operation(model)}
    schemas["WebhookPayload"] = {
        "description": "Any webhook body kuitti sends.",
        "oneOf": [{"$ref": f"#/components/schemas/{m.__name__}"} for m in PAYLOAD_MODELS],
    }
    return webhooks


def _markdown(docstring: str) -> str:
    """A docstring's text as one Markdown line (``x`` becomes `x`)."""
    return " ".join(docstring.split()).replace("``", "`")


def _webhook_operation(model: type[Notification]) -> dict[str, Any]:
    return {
        "summary": _markdown(model.__doc__ or model.__name__),
        "operationId": f"webhook_{model.WEBHOOK_NAME}",
        "parameters": _WEBHOOK_HEADERS,
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}}
            },
        },
        "responses": {
            "2XX": {"description": "Received; any other answer, or none in 10 s, is retried."}
        },
    }


def _shape_operation(method: str, path: str, operation: dict[str, Any]) -> None:
    responses = operation.setdefault("responses", {})
    responses.pop("422", None)
    security = SECURITY.get((method, path))
    if security is not None:
        operation["security"] = security
        operation["parameters"] = [
            p
            for p in operation.get("parameters", [])
            if not (p["in"] == "header" and p["name"].lower() in _COVERED_HEADERS)
        ]
        if security != [{"ClientBasic": []}, {}]:
            responses.setdefault("401", {"description": "Missing or wrong key or token."})
        if _APP_FOR_USER in security:
            responses.setdefault(
                "403",
                {"description": "The user's token lacks the scope (`insufficient_scope`)."},
            )
    # An identifier in the path can name nothing.
    if "{" in path:
        responses.setdefault("404", {"description": "Nothing has this identifier."})
    if (method, path) == ("post", "/api/oauth/token"):
        operation["requestBody"] = {
            "required": True,
            "content": {
                "application/x-www-form-urlencoded": {"schema": TOKEN_REQUEST_SCHEMA},
                "application/json": {"schema": TOKEN_REQUEST_SCHEMA},
            },
        }
    # A request the server cannot read (a malformed path, query or cookie) gets 400 in the
    # error shape on any path; a page's own 4xx are HTML pages, those of its edge the shape.
    responses.setdefault("400", {"description": "A malformed request; the text says what."})
    for status, response in responses.items():
        if not status.startswith("4") or "$ref" in response:
            continue
        if path.startswith("/api/"):
            response["content"] = _ERROR_CONTENT
        else:
            response["content"] = {**response.get("content", {}), **_ERROR_CONTENT}
    for name, status in _EDGE_REFERENCED:
        if status == 503 and path in ALWAYS_ADMITTED:
            continue  # never shed, and answer without the database
        responses.setdefault(str(status), {"$ref": f"#/components/responses/{name}"})
