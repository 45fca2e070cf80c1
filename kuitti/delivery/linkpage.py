"""What the receipt link page shows: the receipt's view model (the same one the PDF is drawn
from, so page and PDF agree) plus the page's own parts (language switch, actions)."""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote, urlencode

from fastapi import Request
from sqlalchemy.orm import Session

from kuitti import signatures
from kuitti.delivery.texts import page_text
from kuitti.i18n import LANGUAGE_NAMES, LANGUAGES, Language, negotiate_locale
from kuitti.models import Receipt, ReceiptDelivery, User
from kuitti.receipts.formats.codes import svg
from kuitti.receipts.relations import relations, relations_key
from kuitti.receipts.view import ReceiptView, build_view

# Past this many rows the rest sit behind a "show all rows" disclosure.
LONG_LIST_ROWS = 60


@dataclass(frozen=True)
class LinkPage:
    """A link page address: ``/ns/<namespace>/r/<key>`` or, without a namespace, ``/r/<key>``
    (``key`` is then the private-link token)."""

    namespace: str | None
    key: str
    pdf: bool = False

    @property
    def path(self) -> str:
        if self.namespace is None:
            return f"/r/{quote(self.key, safe='')}"
        return f"/ns/{quote(self.namespace, safe='')}/r/{quote(self.key, safe='')}"

    def page_path(self, lang: str | None = None, *, imported: bool = False) -> str:
        query: dict[str, str] = {}
        if lang in {language.value for language in LANGUAGES}:
            query["lang"] = str(lang)
        if imported:
            query["imported"] = "1"
        return self.path + (f"?{urlencode(query)}" if query else "")

    def pdf_path(self, lang: str | None = None) -> str:
        return f"{self.path}/pdf" + (f"?lang={lang}" if lang else "")


class _ViewCache:
    """The view model and attachment SVGs of recently shown receipts, per language.

    A stored receipt never changes, so an entry never goes stale; building the view of a long
    receipt costs far more than rendering the template, and a link is often opened repeatedly
    (the till, the phone, the e-mail). Bounded, least recently used out, thread-safe."""

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[tuple[uuid.UUID, Language, str], _Entry] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[uuid.UUID, Language, str]) -> _Entry | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
            return entry

    def put(self, key: tuple[uuid.UUID, Language, str], entry: _Entry) -> None:
        with self._lock:
            self._entries[key] = entry
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)


_Entry = tuple[ReceiptView, list[str | None]]
VIEW_CACHE_ENTRIES = 256
_views = _ViewCache(VIEW_CACHE_ENTRIES)


def _rendered_view(session: Session, receipt: Receipt, language: Language) -> _Entry:
    key = (receipt.id, language, relations_key(receipt))
    entry = _views.get(key)
    if entry is None:
        related = relations(session, receipt)
        view = build_view(receipt.document, locale=language.value, relations=related)
        codes = [svg(a.symbology, a.data, scale=4, title=a.title) for a in view.attachments]
        entry = (view, codes)
        _views.put(key, entry)
    return entry


def language_links(path: str, current: Language) -> list[dict[str, str | bool]]:
    """The language switch: this page (``path``, already URL-quoted) in each language."""
    return [
        {
            "code": other.value,
            "name": LANGUAGE_NAMES[other],
            "href": f"{path}?lang={other.value}",
            "current": other is current,
        }
        for other in LANGUAGES
    ]


def page_language(request: Request, lang: str | None) -> Language:
    """``?lang=`` when it names one of ours, else the browser's ``Accept-Language``."""
    if lang:
        for language in LANGUAGES:
            if lang.strip().lower() == language.value:
                return language
    return negotiate_locale(request.headers.get("accept-language"))


def page_context(
    request: Request,
    session: Session,
    receipt: Receipt,
    target: LinkPage,
    lang: str | None,
    *,
    user: User | None,
    imported: bool,
    owners: Session | None = None,
) -> dict[str, Any]:
    """``owners``: where the user's ownership is read when ``session`` reads from a replica:
    the primary, which has the import the page follows."""
    language = page_language(request, lang)
    chosen = language.value if lang else None
    owned = (
        user is not None
        and (owners or session).get(ReceiptDelivery, (user.id, receipt.id)) is not None
    )
    view, codes = _rendered_view(session, receipt, language)

    def t(key: str, **values: str) -> str:
        return page_text(key, language.value, **values)

    return {
        "lang": language.value,
        "t": t,
        "view": view,
        "codes": codes,
        "long_list": len(view.rows) > LONG_LIST_ROWS,
        "first_rows": LONG_LIST_ROWS,
        "languages": language_links(target.path, language),
        "page_path": target.page_path(chosen),
        "pdf_path": target.pdf_path(chosen),
        "user_email": user.email if user else None,
        "owned": owned,
        # A sandbox receipt: marked TEST, and nobody may import it.
        "sandbox": receipt.sandbox,
        "imported": imported and owned,
        "signed": _signed(session, receipt, request.app.state.services.clock.now()),
    }


def _signed(session: Session, receipt: Receipt, now: datetime) -> dict[str, str] | None:
    """Who signed the receipt and where anyone can check it, when its signature verifies
    against the published keys (``kuitti.signatures``); None otherwise."""
    if receipt.signature is None:
        return None
    document = receipt.document.encode("utf-8", errors="replace")
    keys = signatures.jwks(session, now=now)
    verdict = signatures.verify(document, receipt.signature, keys)
    if not verdict.valid or verdict.header is None:
        return None
    return {
        "issuer": str(verdict.header["iss"]),
        "verify_url": signatures.verification_url(document, receipt.signature),
    }
