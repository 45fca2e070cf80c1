"""PDF plumbing shared by the receipt PDF and the Finvoice PDF (reportlab, canvas level).

Layout is done first, drawing second: a ``Flow`` places blocks of drawing operations top-down on
pages (breaking pages between blocks, repeating a header), and only then are the pages drawn. So
the page count is known ("page 2 / 3") and a till-roll page can be exactly as tall as its content.

Documents are PDF/A-3b shaped: embedded DejaVu fonts (shipped in ``kuitti/static/fonts``), an sRGB
output intent, XMP metadata mirroring the document information, and optional embedded files with
an ``AFRelationship`` (the receipt JSON rides along as ``receipt.json``). Output is deterministic:
the creation date is the receipt's time, and the file identifier is derived from the content's
identity, never from "now".

Why this module reaches into reportlab's private attributes (``canvas._doc``, its ``info``'s
``_dateFormatter`` and ``_ID``, and the catalog's class): reportlab's public API has no way to
do either of the two things above. ``invariant=1`` makes output repeatable by fixing the date
and the identifier to constants, not to the receipt's time and identity; and the catalog takes
no ``OutputIntents``, associated files (``AF``) or XMP metadata, which PDF/A needs. The reaching
is confined to ``render_pages`` and ``_finish_pdfa``; reportlab is pinned in ``uv.lock``, and
``tests/receipts/formats/test_service_pdf.py`` (``TestPdfA``, ``test_output_is_deterministic``)
fails if an upgrade moves them, rather than letting the files change silently.

Rendering runs in many threads at once, and reportlab's fonts are shared by all of them (they are
registered once, by name, for the process). Drawing keeps its font state per document, but writing
a document's font subsets reads the font file through one position that every thread shares
(``TTFontFile.makeSubset``), so ``render_pages`` saves one document at a time (``_SAVING``), and
the fonts are registered once under a lock. ``tests/receipts/formats/test_concurrent_renders.py``
renders in many threads at once.

Drawing is typed: a block holds ``DrawOp`` values (text, rule, rectangle, code) and
``_draw_page`` matches them exhaustively.

Why one long module: it is the one toolkit both PDFs draw with (layout, typed drawing
operations, PDF/A finishing), and its parts only make sense together.
"""

from __future__ import annotations

import hashlib
import io
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, Literal, NamedTuple, TypeVar, assert_never
from xml.sax.saxutils import escape

from bidi import get_display  # type: ignore[import-untyped]
from reportlab.pdfbase import pdfmetrics
from reportlab.pdfbase.pdfdoc import (
    XMP,
    PDFArray,
    PDFCatalog,
    PDFDictionary,
    PDFName,
    PDFStream,
    PDFString,
)
from reportlab.pdfbase.ttfonts import TTFont
from reportlab.pdfgen.canvas import Canvas

from kuitti.paths import STATIC_DIR
from kuitti.receipts.formats.codes import CodeModules, draw

FONTS_DIR = STATIC_DIR / "fonts"
ICC_PROFILE = STATIC_DIR / "icc" / "sRGB.icc"

REGULAR = "DejaVuSans"
BOLD = "DejaVuSans-Bold"
MONO = "DejaVuSansMono"
PRODUCER = "kuitti (ReportLab)"
# The largest page side PDF viewers accept (PDF 1.7 implementation limit, 200 inches).
MAX_PAGE_SIDE = 14_400.0

RowT = TypeVar("RowT")

Color = tuple[float, float, float]
BLACK: Color = (0.0, 0.0, 0.0)
GREY: Color = (0.38, 0.40, 0.42)
LIGHT: Color = (0.82, 0.84, 0.86)
ACCENT: Color = (0.05, 0.33, 0.40)
GREEN: Color = (0.05, 0.45, 0.18)
RED: Color = (0.70, 0.08, 0.08)
AMBER: Color = (0.60, 0.40, 0.0)
PALE_RED: Color = (0.99, 0.86, 0.86)

# The mark on every page of a sandbox receipt's PDFs (docs/sandbox.md).
TEST_MARK = "TEST"
TEST_NOTE = "TEST – a sandbox receipt, not a real purchase"

_fonts_ready = False
_REGISTERING = threading.Lock()
_SAVING = threading.Lock()
"""Held while a document is saved: saving writes its font subsets, which read the shared font
files through one shared position."""


def register_fonts() -> None:
    """Register our fonts with reportlab, once per process: a second registration would replace
    a font object that another thread's document is still drawing with."""
    global _fonts_ready
    if _fonts_ready:
        return
    with _REGISTERING:
        if _fonts_ready:
            return
        for name, filename in (
            (REGULAR, "DejaVuSans.ttf"),
            (BOLD, "DejaVuSans-Bold.ttf"),
            (MONO, "DejaVuSansMono.ttf"),
        ):
            pdfmetrics.registerFont(TTFont(name, str(FONTS_DIR / filename)))
        _fonts_ready = True


def text_width(text: str, font: str, size: float) -> float:
    if not _fonts_ready:
        register_fonts()
    width: float = pdfmetrics.stringWidth(text, font, size)
    return width


def clean(text: str) -> str:
    """Text safe to draw on one line: control characters (tabs, line breaks…) become spaces."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else " " for c in text)


_RTL = re.compile("[\u0590-\u08ff\ufb1d-\ufdff\ufe70-\ufeff]")


def visual(text: str) -> str:
    """A line in display order: right-to-left runs (Hebrew, Arabic) reordered by the Unicode
    bidi algorithm, since PDF text is drawn left to right. Lines without RTL text are unchanged."""
    if _RTL.search(text) is None:
        return text
    return str(get_display(text))


def wrap(text: str, font: str, size: float, width: float, max_lines: int = 400) -> list[str]:
    """Greedy word wrap to ``width`` points; words longer than a line are broken by character.
    Line breaks in ``text`` are kept."""
    lines: list[str] = []
    for paragraph in text.splitlines() or [""]:
        paragraph = clean(paragraph).rstrip()
        if text_width(paragraph, font, size) <= width:
            lines.append(paragraph)
            continue
        current = ""
        for word in paragraph.split(" "):
            candidate = f"{current} {word}" if current else word
            if text_width(candidate, font, size) <= width:
                current = candidate
                continue
            if current:
                lines.append(current)
            current = ""
            while text_width(word, font, size) > width and len(word) > 1:
                cut = _fit(word, font, size, width)
                lines.append(word[:cut])
                word = word[cut:]
            current = word
        lines.append(current)
        if len(lines) >= max_lines:
            break
    return lines[:max_lines]


def _fit(word: str, font: str, size: float, width: float) -> int:
    low, high = 1, len(word)
    while low < high:
        mid = (low + high + 1) // 2
        if text_width(word[:mid], font, size) <= width:
            low = mid
        else:
            high = mid - 1
    return low


def fit(
    text: str, font: str, size: float, width: float, smallest: float = 5.0
) -> tuple[str, float]:
    """(text, size) that fits ``width``: the font shrinks down to ``smallest``, then the text is
    cut with an ellipsis. Table cells use it, so a huge amount never runs into its neighbour."""
    measured = text_width(text, font, size)
    if measured <= width:
        return text, size
    smaller = max(smallest, size * width / measured)
    if text_width(text, font, smaller) <= width:
        return text, smaller
    return ellipsize(text, font, smaller, width), smaller


def ellipsize(text: str, font: str, size: float, width: float) -> str:
    text = clean(text)
    if text_width(text, font, size) <= width:
        return text
    cut = _fit(text, font, size, width - text_width("…", font, size))
    return text[:cut] + "…"


# --------------------------------------------------------------------------------------------
# Layout


Align = Literal["l", "r", "c"]


class TextOp(NamedTuple):
    """Text with its baseline at ``y``; ``align`` says which end of it ``x`` is."""

    x: float
    y: float
    font: str
    size: float
    text: str
    align: Align
    color: Color


class LineOp(NamedTuple):
    """A horizontal rule from ``x1`` to ``x2`` at ``y``."""

    x1: float
    x2: float
    y: float
    width: float
    color: Color


class RectOp(NamedTuple):
    """A filled rectangle whose top-left corner is (x, y)."""

    x: float
    y: float
    w: float
    h: float
    color: Color


class CodeOp(NamedTuple):
    """A QR code or barcode whose top-left corner (quiet zone included) is (x, y)."""

    x: float
    y: float
    modules: CodeModules
    module_size: float


DrawOp = TextOp | LineOp | RectOp | CodeOp
"""One drawing operation; ``y`` grows downwards from the top of its block, then of its page."""


@dataclass(slots=True)
class Block:
    """Drawing operations relative to the block's top edge (y grows downwards)."""

    ops: list[DrawOp] = field(default_factory=list)
    height: float = 0.0

    def text(
        self,
        x: float,
        y: float,
        text: str,
        font: str = REGULAR,
        size: float = 9,
        *,
        align: Align = "l",
        color: Color = BLACK,
    ) -> None:
        """Text whose baseline is ``y`` below the block top."""
        self.ops.append(TextOp(x, y, font, size, visual(clean(text)), align, color))

    def cell(
        self,
        x: float,
        y: float,
        text: str,
        width: float,
        font: str = REGULAR,
        size: float = 9,
        *,
        align: Align = "r",
        color: Color = BLACK,
    ) -> None:
        """Text shrunk (then cut) to fit ``width`` points."""
        fitted, fitted_size = fit(clean(text), font, size, width)
        self.text(x, y, fitted, font, fitted_size, align=align, color=color)

    def line(
        self, x1: float, x2: float, y: float, *, width: float = 0.5, color: Color = LIGHT
    ) -> None:
        self.ops.append(LineOp(x1, x2, y, width, color))

    def rect(self, x: float, y: float, w: float, h: float, color: Color) -> None:
        self.ops.append(RectOp(x, y, w, h, color))

    def code(self, modules: CodeModules, x: float, y: float, module_size: float) -> None:
        """A code whose top-left corner (quiet zone included) is at (x, y)."""
        self.ops.append(CodeOp(x, y, modules, module_size))

    def grow(self, height: float) -> None:
        self.height = max(self.height, height)


@dataclass(slots=True)
class Page:
    ops: list[DrawOp] = field(default_factory=list)
    used: float = 0.0


class Flow:
    """Places blocks top-down on pages of ``page_height`` (content area ``top``..``bottom``)."""

    def __init__(
        self,
        *,
        page_width: float,
        page_height: float,
        margin_x: float,
        margin_top: float,
        margin_bottom: float,
    ) -> None:
        self.page_width = page_width
        self.page_height = page_height
        self.left = margin_x
        self.right = page_width - margin_x
        self.width = self.right - self.left
        self.margin_top = margin_top
        self.margin_bottom = margin_bottom
        self.pages: list[Page] = []
        self.y = 0.0
        self.on_new_page: Callable[[Flow], None] | None = None
        self._new_page()

    @property
    def limit(self) -> float:
        return self.page_height - self.margin_top - self.margin_bottom

    def _new_page(self) -> None:
        self.pages.append(Page())
        self.y = 0.0
        if self.on_new_page is not None and len(self.pages) > 1:
            hook, self.on_new_page = self.on_new_page, None
            try:
                hook(self)
            finally:
                self.on_new_page = hook

    def place(self, block: Block, *, gap_after: float = 0.0, keep: float = 0.0) -> None:
        """Place ``block``; ``keep`` points of what follows must fit on the same page too
        (a heading is never left alone at the foot of a page)."""
        if self.y + block.height + keep > self.limit and self.y > 0:
            self._new_page()
        page = self.pages[-1]
        top = self.margin_top + self.y
        page.ops.extend(op._replace(y=op.y + top) for op in block.ops)
        self.y += block.height + gap_after
        page.used = self.margin_top + self.y

    def space(self, height: float) -> None:
        if self.y > 0:
            self.y = min(self.y + height, self.limit)

    def lines(
        self,
        lines: Iterable[str],
        *,
        x: float | None = None,
        font: str = REGULAR,
        size: float = 9,
        leading: float | None = None,
        color: Color = BLACK,
    ) -> None:
        """Lines of text, each its own block (long text flows over pages)."""
        step = leading or size * 1.3
        for text in lines:
            block = Block(height=step)
            block.text(self.left if x is None else x, size, text, font, size, color=color)
            self.place(block)


# --------------------------------------------------------------------------------------------
# Drawing and PDF/A


def table(
    flow: Flow,
    rows: Iterable[RowT],
    draw_row: Callable[[RowT], None],
    *,
    header: Callable[[Flow], None],
    continuation: Callable[[Flow], None],
) -> None:
    """Draw a table: ``header``, then each row; a page the rows run onto starts with
    ``continuation`` and the header again. Afterwards new pages get ``continuation`` alone."""

    def rows_page(page_flow: Flow) -> None:
        continuation(page_flow)
        header(page_flow)

    header(flow)
    flow.on_new_page = rows_page
    for row in rows:
        draw_row(row)
    flow.on_new_page = continuation


@dataclass(frozen=True, slots=True)
class Metadata:
    title: str
    author: str
    subject: str
    created: datetime  # aware; becomes CreationDate and ModDate
    identity: str  # stable identity of the content (e.g. receipt id + format)
    keywords: str = ""
    language: str = "en"


@dataclass(frozen=True, slots=True)
class EmbeddedFile:
    name: str
    content: bytes
    mime: str
    description: str
    relationship: str = "Data"  # Source, Data, Alternative, Supplement, Unspecified


class _PdfACatalog(PDFCatalog):  # type: ignore[misc]
    __NoDefault__: ClassVar[list[str]] = [*PDFCatalog.__NoDefault__, "OutputIntents", "AF"]
    __Refs__: ClassVar[list[str]] = [*PDFCatalog.__Refs__]


def _pdf_date(moment: datetime) -> str:
    offset = moment.utcoffset()
    minutes = int(offset.total_seconds() // 60) if offset is not None else 0
    sign = "+" if minutes >= 0 else "-"
    hours, mins = divmod(abs(minutes), 60)
    return f"D:{moment:%Y%m%d%H%M%S}{sign}{hours:02d}'{mins:02d}'"


def _xmp_date(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds")


def _xmp(meta: Metadata, embedded: list[EmbeddedFile]) -> str:
    def x(text: str) -> str:
        return escape(clean(text), {'"': "&quot;"})

    created = _xmp_date(meta.created)
    return f"""<?xpacket begin="\ufeff" id="W5M0MpCehiHzreSzNTczkc9d"?>
<x:xmpmeta xmlns:x="adobe:ns:meta/">
<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">
<rdf:Description rdf:about="" xmlns:pdfaid="http://www.aiim.org/pdfa/ns/id/">
<pdfaid:part>3</pdfaid:part><pdfaid:conformance>B</pdfaid:conformance>
</rdf:Description>
<rdf:Description rdf:about="" xmlns:dc="http://purl.org/dc/elements/1.1/">
<dc:format>application/pdf</dc:format>
<dc:title><rdf:Alt><rdf:li xml:lang="x-default">{x(meta.title)}</rdf:li></rdf:Alt></dc:title>
<dc:creator><rdf:Seq><rdf:li>{x(meta.author)}</rdf:li></rdf:Seq></dc:creator>
<dc:description><rdf:Alt><rdf:li xml:lang="x-default">{x(meta.subject)}</rdf:li></rdf:Alt>
</dc:description>
</rdf:Description>
<rdf:Description rdf:about="" xmlns:xmp="http://ns.adobe.com/xap/1.0/">
<xmp:CreateDate>{created}</xmp:CreateDate><xmp:ModifyDate>{created}</xmp:ModifyDate>
<xmp:MetadataDate>{created}</xmp:MetadataDate><xmp:CreatorTool>kuitti</xmp:CreatorTool>
</rdf:Description>
<rdf:Description rdf:about="" xmlns:pdf="http://ns.adobe.com/pdf/1.3/">
<pdf:Producer>{x(PRODUCER)}</pdf:Producer><pdf:Keywords>{x(meta.keywords)}</pdf:Keywords>
</rdf:Description>
</rdf:RDF>
</x:xmpmeta>
<?xpacket end="w"?>"""


_icc_bytes: bytes | None = None


def _icc() -> bytes:
    global _icc_bytes
    if _icc_bytes is None:
        _icc_bytes = ICC_PROFILE.read_bytes()
    return _icc_bytes


def _finish_pdfa(canvas: Canvas, meta: Metadata, embedded: list[EmbeddedFile]) -> None:
    doc = canvas._doc
    catalog = doc.Catalog
    catalog.__class__ = _PdfACatalog
    catalog.Lang = PDFString(meta.language)
    catalog.Metadata = XMP(creator=lambda _doc: _xmp(meta, embedded).encode("utf-8"))
    profile = PDFStream(PDFDictionary({"N": 3}), _icc(), filters=None)
    intent = PDFDictionary(
        {
            "Type": PDFName("OutputIntent"),
            "S": PDFName("GTS_PDFA1"),
            "OutputConditionIdentifier": PDFString("sRGB IEC61966-2.1"),
            "Info": PDFString("sRGB IEC61966-2.1"),
            "DestOutputProfile": doc.Reference(profile),
        }
    )
    catalog.OutputIntents = PDFArray([intent])
    if embedded:
        specs = []
        names: list[Any] = []
        for item in embedded:
            stream = PDFStream(
                PDFDictionary(
                    {
                        "Type": PDFName("EmbeddedFile"),
                        "Subtype": PDFName(item.mime.replace("/", "#2F")),
                        "Params": PDFDictionary(
                            {
                                "Size": len(item.content),
                                "ModDate": PDFString(_pdf_date(meta.created)),
                            }
                        ),
                    }
                ),
                item.content,
            )
            spec = PDFDictionary(
                {
                    "Type": PDFName("Filespec"),
                    "F": PDFString(item.name),
                    "UF": PDFString(item.name),
                    "Desc": PDFString(item.description),
                    "AFRelationship": PDFName(item.relationship),
                    "EF": PDFDictionary({"F": doc.Reference(stream), "UF": doc.Reference(stream)}),
                }
            )
            reference = doc.Reference(spec)
            specs.append(reference)
            names.extend([PDFString(item.name), reference])
        catalog.AF = PDFArray(specs)
        catalog.Names = PDFDictionary({"EmbeddedFiles": PDFDictionary({"Names": PDFArray(names)})})


def render_pages(
    flow: Flow,
    meta: Metadata,
    *,
    embedded: list[EmbeddedFile] | None = None,
    footer: Callable[[int, int], str] | None = None,
    decorate: Callable[[Canvas, int, int, float], None] | None = None,
    fit_height: bool = False,
    test_mark: bool = False,
) -> bytes:
    """Draw the laid-out pages. ``fit_height`` crops each page to its content (till roll);
    ``test_mark`` marks every page TEST (a sandbox receipt), behind the content and in words
    at the top."""
    register_fonts()
    buffer = io.BytesIO()
    canvas = Canvas(
        buffer,
        pagesize=(flow.page_width, flow.page_height),
        invariant=1,
        pageCompression=1,
        pdfVersion=(1, 7),
        lang=meta.language,
        # reportlab opens each page in its initial font: make it ours, so no unembedded
        # standard font (Helvetica) is ever referenced, as PDF/A requires.
        initialFontName=REGULAR,
        initialFontSize=9,
    )
    canvas.setTitle(clean(meta.title))
    canvas.setAuthor(clean(meta.author))
    canvas.setSubject(clean(meta.subject))
    canvas.setCreator("kuitti")
    canvas.setProducer(PRODUCER)
    canvas.setKeywords(clean(meta.keywords))
    stamp = _pdf_date(meta.created)
    canvas._doc.info._dateFormatter = lambda *_parts: stamp
    digest = hashlib.md5(meta.identity.encode(), usedforsecurity=False).hexdigest().upper()
    canvas._doc._ID = f"\n[<{digest}><{digest}>]\n".encode()
    total = len(flow.pages)
    for number, page in enumerate(flow.pages, start=1):
        height = flow.page_height
        if fit_height:
            height = min(MAX_PAGE_SIDE, page.used + flow.margin_bottom)
        canvas.setPageSize((flow.page_width, height))
        if test_mark:
            _draw_test_mark(canvas, flow.page_width, height, flow.margin_bottom)
        _draw_page(canvas, page, height)
        if footer is not None:
            text = footer(number, total)
            canvas.setFont(REGULAR, 7)
            canvas.setFillColorRGB(*GREY)
            canvas.drawCentredString(flow.page_width / 2, flow.margin_bottom / 2, text)
        if decorate is not None:
            decorate(canvas, number, total, height)
        canvas.showPage()
    _finish_pdfa(canvas, meta, embedded or [])
    with _SAVING:
        canvas.save()
    return buffer.getvalue()


def _draw_test_mark(canvas: Canvas, width: float, height: float, margin: float) -> None:
    """A large pale TEST across the page (drawn first, so the receipt stays legible over it;
    opaque colours only, as PDF/A prefers) and a red line saying what it means."""
    canvas.saveState()
    size = min(width, height) / 3.2
    canvas.setFont(BOLD, size)
    canvas.setFillColorRGB(*PALE_RED)
    canvas.translate(width / 2, height / 2)
    if height > width / 2:
        canvas.rotate(35)
    canvas.drawCentredString(0, -size / 3, TEST_MARK)
    canvas.restoreState()
    canvas.saveState()
    canvas.setFont(BOLD, 8)
    canvas.setFillColorRGB(*RED)
    canvas.drawCentredString(width / 2, height - min(margin, 24) / 2 - 4, TEST_NOTE)
    canvas.restoreState()


def _draw_page(canvas: Canvas, page: Page, height: float) -> None:
    font_state: tuple[str, float] | None = None
    color_state: Color | None = None
    for op in page.ops:
        match op:
            case TextOp(x, y, font, size, text, align, color):
                if (font, size) != font_state:
                    canvas.setFont(font, size)
                    font_state = (font, size)
                if color != color_state:
                    canvas.setFillColorRGB(*color)
                    color_state = color
                match align:
                    case "r":
                        canvas.drawRightString(x, height - y, text)
                    case "c":
                        canvas.drawCentredString(x, height - y, text)
                    case "l":
                        canvas.drawString(x, height - y, text)
                    case _:
                        assert_never(align)
            case LineOp(x1, x2, y, width, color):
                canvas.setStrokeColorRGB(*color)
                canvas.setLineWidth(width)
                canvas.line(x1, height - y, x2, height - y)
            case RectOp(x, y, w, h, color):
                canvas.setFillColorRGB(*color)
                color_state = color
                canvas.rect(x, height - y - h, w, h, stroke=0, fill=1)
            case CodeOp(x, y, modules, module_size):
                total_height = modules.total_height * module_size
                draw(canvas, modules, x, height - y - total_height, module_size)
                color_state = None
            case _:
                assert_never(op)
