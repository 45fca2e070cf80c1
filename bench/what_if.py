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
- ``without_either``: both.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import orjson
from fastapi import FastAPI

from kuitti.asgi import app_from_environment
from kuitti.config import Settings
from kuitti.db import Database
from kuitti.delivery import links
from kuitti.ids import new_id
from kuitti.receipts import ingest, validation
from kuitti.receipts.schema import Receipt
from kuitti.receipts.service import CreatedReceipt, Outcome, Posting


def _answer_unstored(_db: Database, settings: Settings, postings: list[Posting]) -> list[Outcome]:
    """``ingest.write_batch``'s answers without the database."""
    outcomes = []
    for _ in postings:
        receipt_id = new_id()
        body = CreatedReceipt(
            receipt_id=receipt_id,
            receipt_links=[],
            tokens=[],
            receipt_web_url=links.private_link(settings, receipt_id),
        ).as_json()
        outcomes.append(Outcome(answer=(200, body)))
    return outcomes


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


def _replace(module: ModuleType, name: str, stand_in: object) -> None:
    """Replace a module global that the code reads at call time; refuse a name the module no
    longer has, so that a renamed part fails here instead of measuring nothing."""
    if name not in vars(module):
        raise SystemExit(f"bench/what_if.py: {module.__name__} has no {name} any more")
    vars(module)[name] = stand_in


def _free_writer() -> None:
    _replace(ingest, "write_batch", _answer_unstored)


def _free_models() -> None:
    _replace(validation, "Receipt", _RememberedReceipts())


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
