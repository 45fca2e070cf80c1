"""The OpenAPI document checked against what the test suite sees (a pytest plugin).

Every answer a test receives over httpx (the live server, an app under ``httpx.ASGITransport``,
a served ``kuitti serve``, the client package) is recorded at the transport, redirects included,
as (method, path, status, media type). At the end of the session each one whose path and method
are a documented operation of ``/openapi.json`` must be declared there: its status (or a range
such as ``4XX``, or ``default``) and, when the answer has a body, its media type. The session
fails with the list of what is not. Requests the document does not describe (pages left out of
it, static files, unknown paths) are not checked. Under pytest-xdist each worker checks what it
saw, which is the same rule.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from kuitti.app import create_app
from kuitti.config import Settings

# Answers that carry no body, whatever their headers say.
_BODILESS = {204, 304}


@dataclass(frozen=True, order=True)
class Seen:
    method: str
    path: str
    status: int
    media_type: str | None


SEEN: set[Seen] = set()


def record(request: httpx.Request, response: httpx.Response) -> None:
    content_type = response.headers.get("content-type")
    media_type = content_type.split(";")[0].strip().lower() if content_type else None
    SEEN.add(Seen(request.method, request.url.path, response.status_code, media_type))


AsyncSend = Callable[[Any, httpx.Request], Coroutine[Any, Any, httpx.Response]]


def _recording(send: AsyncSend) -> AsyncSend:
    async def handle_async_request(self: Any, request: httpx.Request) -> httpx.Response:
        response = await send(self, request)
        record(request, response)
        return response

    return handle_async_request


def _install() -> None:
    """Wrap httpx's transports: the real request runs, its answer is recorded."""
    sync_send = httpx.HTTPTransport.handle_request

    def handle_request(self: httpx.HTTPTransport, request: httpx.Request) -> httpx.Response:
        response = sync_send(self, request)
        record(request, response)
        return response

    httpx.HTTPTransport.handle_request = handle_request  # type: ignore[method-assign]
    transports: tuple[type[Any], ...] = (httpx.AsyncHTTPTransport, httpx.ASGITransport)
    for transport in transports:
        transport.handle_async_request = _recording(transport.handle_async_request)


def _template_pattern(template: str, *, slashes: bool) -> re.Pattern[str]:
    """``/r/{token}/pdf`` as a regular expression; ``slashes``: a parameter may span segments
    (Starlette's ``:path`` parameters, which the document writes as plain ``{name}``)."""
    value = ".+" if slashes else "[^/]+"
    parts = re.split(r"\{[^}]+\}", template)
    return re.compile("".join([re.escape(parts[0]), *(value + re.escape(p) for p in parts[1:])]))


def _operation(
    document: dict[str, Any], method: str, path: str
) -> tuple[str, dict[str, Any] | None]:
    """The template ``path`` falls under (``""`` for none) and its operation for ``method``."""
    for slashes in (False, True):
        for template, operations in document["paths"].items():
            if _template_pattern(template, slashes=slashes).fullmatch(path):
                return template, operations.get(method.lower())
    return "", None


def _declared_response(responses: dict[str, Any], status: int) -> dict[str, Any] | None:
    for key in (str(status), f"{str(status)[0]}XX", "default"):
        if key in responses:
            found: dict[str, Any] = responses[key]
            return found
    return None


def _resolve(document: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    reference = response.get("$ref")
    if reference is None:
        return response
    name = reference.removeprefix("#/components/responses/")
    resolved: dict[str, Any] = document["components"]["responses"][name]
    return resolved


def _media_declared(media_type: str, content: Iterable[str]) -> bool:
    for declared in content:
        kind, _, sub = declared.partition("/")
        if declared in (media_type, "*/*") or (sub == "*" and media_type.startswith(kind + "/")):
            return True
    return False


def undeclared(document: dict[str, Any], seen: Iterable[Seen]) -> list[str]:
    """What ``seen`` holds that ``document`` does not declare: one line per operation, status
    and media type, with one path that got it."""
    found: dict[str, str] = {}
    # An answer without a body has no media type: None sorts before any.
    for answer in sorted(seen, key=lambda a: (a.method, a.path, a.status, a.media_type or "")):
        template, operation = _operation(document, answer.method, answer.path)
        if operation is None:
            continue
        where = f"{answer.method} {template}"
        declared = _declared_response(operation["responses"], answer.status)
        if declared is None:
            found.setdefault(f"{where}: status {answer.status}", answer.path)
            continue
        if answer.media_type is None or answer.status in _BODILESS:
            continue
        content = _resolve(document, declared).get("content", {})
        if not _media_declared(answer.media_type, content):
            found.setdefault(f"{where}: {answer.status} {answer.media_type}", answer.path)
    return [f"{what} is not declared (seen on {path})" for what, path in sorted(found.items())]


def service_document() -> dict[str, Any]:
    """``/openapi.json`` as the application builds it (on a database of its own, never used)."""
    with tempfile.TemporaryDirectory(prefix="kuitti-openapi-") as var:
        settings = Settings(
            database_url=f"sqlite:///{Path(var) / 'kuitti.db'}",
            var_dir=Path(var),
            secret_key="openapi-truth-secret-key-not-for-production",
        )
        document: dict[str, Any] = create_app(settings).openapi()
    return document


FOUND: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    _install()


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not SEEN:
        return
    FOUND.extend(undeclared(service_document(), SEEN))
    if FOUND and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not FOUND:
        return
    terminalreporter.section("answers /openapi.json does not declare", sep="=", red=True)
    for line in FOUND:
        terminalreporter.write_line(line)
    terminalreporter.write_line(
        "The session fails: declare each on its route (responses=) or in kuitti/openapi.py."
    )
