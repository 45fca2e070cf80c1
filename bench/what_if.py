"""What-if servers for ``bench/ingest.py --what-if``: kuitti with one part of a receipt post
made free, to measure what that part costs a served post (an upper bound of what any speed-up
of it can give), not to run in production.

Each function is an ASGI app factory for uvicorn (``--factory``), like
``kuitti.asgi:app_from_environment``, which it calls after replacing one part in this process:

- ``without_writer``: the writer stores nothing and answers each post as if it had (a fresh id,
  no links, the private link), so a post is validation, the framework and the answer;
- ``without_models``: Pydantic builds each distinct document's models once and hands the same
  ones back after that (keyed by the document's JSON, which costs about 0.02 ms), so validation
  keeps the JSON edge and the rules across fields but neither builds nor frees models;
- ``without_either``: both;
- ``without_post``: the post is answered at once with a fresh id, the body read but neither
  parsed, validated nor stored, so what is left is the framework, the middleware and the answer
  (kuitti's floor, to hold beside the parse-only ceiling);
- ``without_signing``: each receipt's signature is a constant instead of an ES256 JWS
  (``kuitti.signatures.sign``), so the difference is what signing costs a served post;
- ``without_commit_wait``: each post is answered as soon as it joins the writer's queue, and
  the writer stores it as usual afterwards (kuitti never answers before the commit: this only
  tells the writer's CPU apart from the clients' wait for it). If the writer cannot keep up, its
  queue grows for the whole run: the CPU per *stored* receipt and the peak RSS show it.
"""

from __future__ import annotations

import asyncio
from types import ModuleType
from typing import Any

import orjson
from fastapi import FastAPI

from kuitti import links, signatures
from kuitti.asgi import app_from_environment
from kuitti.config import Settings
from kuitti.db import Database
from kuitti.ids import new_id
from kuitti.posting import ingest
from kuitti.posting.ingest import Ingest
from kuitti.posting.service import CreatedReceipt, Outcome, Prepared
from kuitti.receipts import validation
from kuitti.receipts.schema import Receipt


def _unstored_answer(settings: Settings) -> Outcome:
    """A post's answer as the writer gives it, for a receipt that is not stored."""
    receipt_id = new_id()
    body = CreatedReceipt(
        receipt_id=receipt_id,
        receipt_links=[],
        tokens=[],
        receipt_web_url=links.private_link(settings, receipt_id),
    ).as_json()
    return Outcome(answer=(200, body))


def _write_nothing(_db: Database, settings: Settings, postings: list[Prepared]) -> list[Outcome]:
    """``ingest.write_batch``'s answers without the database."""
    return [_unstored_answer(settings) for _ in postings]


_queue_and_wait = Ingest._write
_writes: set[asyncio.Task[Outcome]] = set()


async def _answer_at_once(self: Ingest, posting: Prepared) -> Outcome:
    """``Ingest._write`` answering when the posting is queued, not when it is committed."""
    write = asyncio.create_task(_queue_and_wait(self, posting))
    _writes.add(write)
    write.add_done_callback(_writes.discard)
    return _unstored_answer(self.services.settings)


class _RememberedReceipts:
    """Stands in for ``Receipt`` in ``kuitti.receipts.validation``: ``model_validate`` builds a
    document's models the first time it is seen and returns the same ones after that."""

    def __init__(self) -> None:
        self._built: dict[bytes, Receipt] = {}

    def model_validate(self, document: Any) -> Receipt:
        key = orjson.dumps(document)
        built = self._built.get(key)
        if built is None:
            built = self._built[key] = Receipt.model_validate(document)
        return built


def _replace(owner: ModuleType | type, name: str, stand_in: object) -> None:
    """Replace a module global or a method that the code looks up at call time; refuse a name
    the owner no longer has, so that a renamed part fails here instead of measuring nothing."""
    if name not in vars(owner):
        raise SystemExit(f"bench/what_if.py: {owner.__name__} has no {name} any more")
    setattr(owner, name, stand_in)


def _free_writer() -> None:
    _replace(ingest, "write_batch", _write_nothing)


def _free_models() -> None:
    _replace(validation, "Receipt", _RememberedReceipts())


async def _answer_unread(self: Ingest, body: bytes, **_headers: str | None) -> tuple[int, Any]:
    """``Ingest.post`` with nothing between the body and the answer."""
    outcome = _unstored_answer(self.services.settings)
    assert outcome.answer is not None
    return outcome.answer


def no_signature(*_args: object, **_named: object) -> str:
    return "unsigned..bench"


def without_signing() -> FastAPI:
    _replace(signatures, "sign", no_signature)
    return app_from_environment()


def without_post() -> FastAPI:
    _replace(Ingest, "post", _answer_unread)
    return app_from_environment()


def without_commit_wait() -> FastAPI:
    _replace(Ingest, "_write", _answer_at_once)
    return app_from_environment()


def without_writer() -> FastAPI:
    _free_writer()
    return app_from_environment()


def without_models() -> FastAPI:
    _free_models()
    return app_from_environment()


def without_either() -> FastAPI:
    _free_writer()
    _free_models()
    return app_from_environment()
