"""Rendering a stored receipt in one of its formats, with a cache of the rendered bytes.

``render(receipt, poster, fmt, layout=, locale=)`` returns the bytes and media type. Rendered bytes
are kept in a bounded in-process LRU cache keyed by what the output depends on (receipt, format,
layout, language, the poster's bank account for Finvoice, whether the backfill has signed it
yet, and the renderer version): a stored document never changes, so an entry never goes
stale — which is why this cache sits next to its function rather than on ``Services``: no
process ever needs to reset or configure it. ``etag()`` gives the same key without rendering or
the document (``cached(etag)`` the bytes if this process has them), so a read answers 304, or
from the cache, before it loads the document.
"""

from __future__ import annotations

import hashlib
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy.orm import Session

from kuitti import signatures
from kuitti.i18n import as_language
from kuitti.models import Partner, Receipt
from kuitti.receipts.formats import (
    DataFormat,
    FinvoiceUnavailable,
    NotSignedYet,
    Rendered,
    finvoice_pdf,
    finvoice_xml,
    safe_name,
    service_pdf,
)
from kuitti.receipts.formats.layout import Layout
from kuitti.receipts.log import Inclusion, inclusion
from kuitti.receipts.relations import NO_RELATIONS, Related, Relations, relations, relations_key
from kuitti.receipts.view import build_view, parse_document, relation_lines

# Bump when a renderer's output changes, so ETags and cached bytes change with it.
RENDERER_VERSION = "2"
CACHE_MAX_ENTRIES = 512
CACHE_MAX_BYTES = 64 * 1024 * 1024


class RenderCache:
    """A thread-safe LRU of rendered bytes, bounded by entries and by total size."""

    def __init__(self, max_entries: int = CACHE_MAX_ENTRIES, max_bytes: int = CACHE_MAX_BYTES):
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._items: OrderedDict[str, Rendered] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: str) -> Rendered | None:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return item

    def put(self, key: str, item: Rendered) -> None:
        size = len(item.content)
        if size > self.max_bytes // 4:
            return  # one huge document must not empty the cache
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= len(old.content)
            self._items[key] = item
            self._bytes += size
            while len(self._items) > self.max_entries or self._bytes > self.max_bytes:
                _, evicted = self._items.popitem(last=False)
                self._bytes -= len(evicted.content)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0

    def __len__(self) -> int:
        return len(self._items)


cache = RenderCache()


class Keyed(Related, Protocol):
    """What a rendering's key depends on, of a receipt: a ``Receipt``, or a read's summary
    (``kuitti.receipts.readers.ReadableReceipt``), so a read tells its ETag before it loads
    the document."""

    @property
    def id(self) -> uuid.UUID: ...

    @property
    def document_hash(self) -> str: ...

    @property
    def signed(self) -> bool: ...


class Account(Protocol):
    """What a rendering's key depends on, of the partner that posted the receipt."""

    @property
    def iban(self) -> str | None: ...

    @property
    def bic(self) -> str | None: ...


def _key_parts(
    receipt: Keyed, poster: Account, fmt: DataFormat, layout: Layout, locale: str, logged: str
) -> tuple[str, ...]:
    base: tuple[str, ...] = (RENDERER_VERSION, str(receipt.id), receipt.document_hash, fmt.value)
    related = relations_key(receipt)
    row = FORMATS[fmt]
    if related and row.shows_relations:
        base = (*base, related)
    if logged and row.shows_proof:
        base = (*base, logged)
    if row.shows_signature and not receipt.signed:
        # Signed later by the backfill: its rendering (and ETag) then changes.
        base = (*base, "unsigned")
    return (*base, *row.depends_on(poster, layout, locale))


def etag(
    receipt: Keyed,
    poster: Account,
    fmt: DataFormat,
    *,
    layout: Layout = Layout.A4,
    locale: str = "en",
    logged: str = "",
) -> str:
    """A strong ETag for the rendering (no rendering needed: the relations' part of the key is
    read from the receipt row; ``logged``, for the formats that carry the receipt's proof of
    inclusion, is where the receipt is in the receipt log, ``kuitti.receipts.log.log_state``)."""
    parts = _key_parts(receipt, poster, fmt, layout, locale, logged)
    digest = hashlib.sha256("\x1f".join(parts).encode())
    return f'"{digest.hexdigest()[:32]}"'


def cached(tag: str) -> Rendered | None:
    """The rendering of this ETag, if this process has it."""
    return cache.get(tag)


def render(
    receipt: Receipt,
    poster: Partner,
    fmt: DataFormat,
    *,
    layout: Layout = Layout.A4,
    locale: str = "en",
    relations: Relations = NO_RELATIONS,
    log: Inclusion | None = None,
) -> Rendered:
    """The receipt in the requested format. ``poster`` is the partner that posted it (Finvoice
    needs its bank account). ``layout`` (A4 or till roll) applies to ``service_pdf``;
    ``locale`` (fi, sv, en) to the PDFs' labels and number style; ``relations`` are the
    receipt's (``kuitti.receipts.relations.relations``); ``log`` its proof of inclusion in the
    receipt log, which ``signed_json`` and the ``service_pdf``'s attachment carry
    (``kuitti.receipts.log.inclusion``)."""
    # The key has the relations' part of the row: rendering them without it would poison it.
    assert relations is not NO_RELATIONS or not relations_key(receipt), "relations not given"
    logged = "" if log is None else log.state
    key = etag(receipt, poster, fmt, layout=layout, locale=locale, logged=logged)
    cached = cache.get(key)
    if cached is not None:
        return cached
    rendered = _render(receipt, poster, fmt, layout, as_language(locale).value, relations, log)
    cache.put(key, rendered)
    return rendered


def render_service_pdf(session: Session, receipt: Receipt, *, locale: str) -> Rendered:
    """The receipt's ``service_pdf`` as a person gets it (a link page, an e-mail attachment):
    its poster's name and its relation to a return or purchase read from ``session``."""
    poster = session.get(Partner, receipt.partner_id)
    assert poster is not None
    return render(
        receipt,
        poster,
        DataFormat.SERVICE_PDF,
        locale=locale,
        relations=relations(session, receipt),
        log=inclusion(session, receipt),
    )


def _render(
    receipt: Receipt,
    poster: Partner,
    fmt: DataFormat,
    layout: Layout,
    locale: str,
    relations: Relations,
    log: Inclusion | None,
) -> Rendered:
    row = FORMATS[fmt]
    content = row.render(receipt, poster, layout, locale, relations, log)
    name = row.file_name.format(number=safe_name(receipt.receipt_number))
    signature = receipt.signature if fmt is DataFormat.SERVICE_JSON else None
    return Rendered(content, row.media_type, name, signature)


def _service_json(
    receipt: Receipt,
    _poster: Partner,
    _layout: Layout,
    _locale: str,
    _relations: Relations,
    _log: Inclusion | None,
) -> bytes:
    return _utf8(receipt.document)


def _signed_json(
    receipt: Receipt,
    _poster: Partner,
    _layout: Layout,
    _locale: str,
    _relations: Relations,
    log: Inclusion | None,
) -> bytes:
    return signatures.signed_document(_utf8(receipt.document), _signature(receipt), _member(log))


def _member(log: Inclusion | None) -> dict[str, Any] | None:
    """The ``log`` member of a saved receipt: its proof, or that it is pending; None when the
    receipt is not in the log."""
    return None if log is None else log.member


def _signature(receipt: Receipt) -> str:
    if receipt.signature is None:
        raise NotSignedYet(
            "This receipt was stored before kuitti signed receipts and is not signed yet; the "
            "operator signs it with `kuitti receipts sign-existing`."
        )
    return receipt.signature


def _service_pdf(
    receipt: Receipt,
    _poster: Partner,
    layout: Layout,
    locale: str,
    relations: Relations,
    log: Inclusion | None,
) -> bytes:
    view = build_view(parse_document(receipt.document), locale=locale, relations=relations)
    document = _utf8(receipt.document)
    signed = None
    if receipt.signature is not None:
        signed = service_pdf.SignedPart(
            saved=signatures.signed_document(document, receipt.signature, _member(log)),
            issuer=signatures.signed_header(receipt.signature)["iss"],
            verify_url=signatures.verification_url(document, receipt.signature),
        )
    return service_pdf.render_service_pdf(
        view,
        layout=layout,
        document_json=document,
        identity=f"{receipt.id}/{DataFormat.SERVICE_PDF.value}/{layout.value}/{locale}",
        test_mark=receipt.sandbox,
        signed=signed,
    )


def _finvoice(
    receipt: Receipt,
    poster: Partner,
    _layout: Layout,
    _locale: str,
    relations: Relations,
    _log: Inclusion | None,
) -> bytes:
    return _finvoice_xml(receipt, poster, relations)


def _finvoice_pdf(
    receipt: Receipt,
    poster: Partner,
    _layout: Layout,
    locale: str,
    relations: Relations,
    _log: Inclusion | None,
) -> bytes:
    xml = render(receipt, poster, DataFormat.FINVOICE_XML, relations=relations).content
    return finvoice_pdf.render_finvoice_pdf(
        xml,
        locale=locale,
        created=_receipt_time(receipt),
        identity=f"{receipt.id}/{DataFormat.FINVOICE_PDF.value}/{locale}",
        relations=relation_lines(relations, as_language(locale)),
        test_mark=receipt.sandbox,
    )


@dataclass(frozen=True)
class Format:
    """One output format: what it is called and described as, and how it is rendered."""

    media_type: str
    file_name: str  # ``{number}``: the receipt number, made safe for a file name
    description: str  # in the read endpoint's API document
    render: Callable[[Receipt, Partner, Layout, str, Relations, Inclusion | None], bytes]
    depends_on: Callable[[Account, Layout, str], tuple[str, ...]]
    """What the rendering depends on besides the document (part of its ETag)."""
    shows_relations: bool = True  # a return's original, a purchase's returns
    shows_signature: bool = True  # the receipt's signature (a header, a PDF's attachment)
    shows_proof: bool = False  # its proof of inclusion in the receipt log (changes when sealed)


def _language(locale: str) -> str:
    return as_language(locale).value


def _account(poster: Account) -> tuple[str, str]:
    return poster.iban or "", poster.bic or ""


FORMATS: dict[DataFormat, Format] = {
    DataFormat.SERVICE_JSON: Format(
        "application/json",
        "receipt-{number}.json",
        "the document as posted",
        _service_json,
        lambda _poster, _layout, _locale: (),
        shows_relations=False,
    ),
    DataFormat.SERVICE_PDF: Format(
        "application/pdf",
        "receipt-{number}.pdf",
        "PDF/A-3 with the JSON embedded; `layout=a4` or `roll`",
        _service_pdf,
        lambda _poster, layout, locale: (layout.value, _language(locale)),
        shows_proof=True,
    ),
    DataFormat.FINVOICE_XML: Format(
        finvoice_xml.MEDIA_TYPE,
        "finvoice-{number}.xml",
        "Finvoice 3.0, ISO-8859-15",
        _finvoice,
        lambda poster, _layout, _locale: _account(poster),
        shows_signature=False,
    ),
    DataFormat.FINVOICE_PDF: Format(
        "application/pdf",
        "finvoice-{number}.pdf",
        "the Finvoice drawn as a Finnish invoice",
        _finvoice_pdf,
        lambda poster, _layout, locale: (*_account(poster), _language(locale)),
        shows_signature=False,
    ),
    DataFormat.SIGNED_JSON: Format(
        signatures.SIGNED_MEDIA_TYPE,
        "receipt-{number}.signed.json",
        "the document and its signature as one JWS (RFC 7515 JSON, RFC 7797), to save and "
        "verify anywhere",
        _signed_json,
        lambda _poster, _layout, _locale: (),
        shows_relations=False,
        shows_proof=True,
    ),
}
"""Every output format, in the order the API document lists them: adding a format is a row."""


def _utf8(text: str) -> bytes:
    # A stored document is valid JSON text; "replace" only matters for a lone surrogate escape.
    return text.encode("utf-8", errors="replace")


def _receipt_time(receipt: Receipt) -> datetime:
    return parse_document(receipt.document).receipt_time


def _finvoice_xml(receipt: Receipt, poster: Partner, relations: Relations) -> bytes:
    account = finvoice_xml.seller_account(poster.iban, poster.bic)
    if account is None:
        raise FinvoiceUnavailable(
            "Finvoice needs the seller's bank account (IBAN), and the partner that posted this "
            "receipt has none on record; the operator can add it with "
            "`kuitti partner create … --iban IBAN --bic BIC`."
        )
    try:
        return finvoice_xml.render_finvoice_xml(
            parse_document(receipt.document),
            account,
            receipt_id=receipt.id,
            poster_name=poster.name,
            relations=relations,
        )
    except finvoice_xml.FinvoiceLimitError as exc:
        raise FinvoiceUnavailable(str(exc)) from None
