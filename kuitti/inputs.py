"""JSON bodies that can be kept exactly as posted, parsed once for every JSON route.

A receipt is stored as posted, so a body must survive a round trip unchanged on both databases.
Refused, anywhere in the body, known keys or not (see docs/security.md):

- bytes that are not UTF-8 (a UTF-16 body among them), or not RFC 8259 JSON: ``malformed_json``;
- ``NaN``/``Infinity``, and nesting deeper than ``MAX_JSON_DEPTH``: ``malformed_json``;
- a string or key with U+0000 or a lone surrogate (``"\\ud800"``), an integer outside the signed
  64-bit range, a number too large for a float (``1e400``), an object with the same key twice:
  ``invalid_value`` naming the JSON path.

Two ways to the same answer. ``parse_json_fully`` is the reference: the standard library's parser
with a hook that sees every key, then a walk that names each problem's path. ``parse_json`` first
tries orjson, several times cheaper, which cannot see a duplicated key and reads an integer
beyond 64 bits as a float; it keeps orjson's result only when evidence from the bytes proves the
two parsers agree and nothing is refused (see ``json_quickly``), and otherwise asks the reference.
So it can only be more cautious than the reference, never answer differently.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import orjson

from kuitti.errors import ErrorDetail, InvalidRequest

MAX_JSON_DEPTH = 64
"""Arrays and objects nested deeper than this are refused (a receipt needs about six levels)."""

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

_BAD_TEXT = re.compile("[\x00\ud800-\udfff]")
# Raw NUL and surrogates cannot appear in valid UTF-8 JSON text, only as \u escapes.
_SUSPECT_ESCAPE = re.compile(r"\\u(?:0000|[dD][89a-fA-F])")


class _DuplicatedKeys(dict[str, object]):
    """An object that had a key twice; the walk reports it with its path."""

    duplicated: str = ""


def _object(pairs: list[tuple[str, object]]) -> dict[str, object]:
    result = dict(pairs)
    if len(result) == len(pairs):
        return result
    keys = [key for key, _ in pairs]
    marked = _DuplicatedKeys(result)
    marked.duplicated = next(key for i, key in enumerate(keys) if key in keys[:i])
    return marked


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


_UNICODE_ESCAPE = re.compile(rb"\\u([0-9a-fA-F]{4})")
# An escape the quick path cannot vouch for: U+0000, or a colon (which would spoil the count of
# keys in ``json_quickly``). orjson itself refuses every lone surrogate.
_DOUBTFUL_ESCAPES = frozenset({b"0000", b"003a", b"003A"})
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
# Every integer of at most 18 digits is within the signed 64-bit range.
_NINETEEN_DIGITS = b"0" * 19
_NUMBER_BYTES_AS_ZERO = bytes.maketrans(b"123456789 -", b"0" * 11)
_FOURTEEN = b"0" * 14
# orjson indents each value by two spaces per level of nesting.
_TOO_DEEP_LINE = b"\n" + b" " * (2 * MAX_JSON_DEPTH)
UNSURE = object()
"""What ``json_quickly`` answers when only ``parse_json_fully`` can tell."""


def parse_json(body: bytes, *, scan: BodyScan | None = None) -> object:
    """The body as JSON that can be stored exactly; ``InvalidRequest`` otherwise. The same
    answer as ``parse_json_fully``, in a fraction of the time for the usual body.

    ``scan``: what ``scan_body(body)`` answers, for a caller that needs it too."""
    data = json_quickly(body, scan=scan)
    return parse_json_fully(body) if data is UNSURE else data


@dataclass(frozen=True)
class BodyScan:
    """What the JSON reading and the card-number check (``kuitti.receipts.validation``) both
    look for in a body's bytes, found once for both: each pass over a 17 KB body costs 8–18 µs,
    a few percent of its validation."""

    long_numbers: bool
    """14 bytes in a row are ASCII digits, spaces or hyphens: the only place where an integer
    too long for 64 bits, or a card number written in ASCII, can be (nearly no body has one)."""
    escapes: frozenset[bytes]
    """The hex digits of each distinct ``\\u`` escape: a text escapes the same few letters
    (ä, ö) many times. Empty for a body without one."""


def scan_body(body: bytes) -> BodyScan:
    return BodyScan(
        long_numbers=_FOURTEEN in body.translate(_NUMBER_BYTES_AS_ZERO),
        escapes=frozenset(_UNICODE_ESCAPE.findall(body)) if b"\\u" in body else frozenset(),
    )


def json_quickly(body: bytes, *, scan: BodyScan | None = None) -> object:
    """orjson's reading of a body in which nothing is refused, or ``UNSURE``.

    Each check is exact or more cautious than the reference:

    - orjson refuses what the standard parser refuses (bad UTF-8, a byte order mark, ``NaN``,
      control characters, a number too large for a float), and every lone surrogate besides,
      escaped or not (it reads a pair as the standard parser does);
    - U+0000 reaches a string only as a ``\\u0000`` escape, which is looked for;
    - integers agree below 19 digits, so a run of 19 digits anywhere is left to the reference;
    - orjson keeps the last of two equal keys, so the parsed value has fewer keys than the body:
      written back out, it has fewer colons. Colons in strings are the same on both sides (raw,
      since an escaped colon is left to the reference), and every key brings one colon;
    - written back out with indentation, a value nested 64 levels deep starts a line with 128
      spaces (strings hold no raw line breaks).
    """
    try:
        data = orjson.loads(body)
        indented = orjson.dumps(data, option=orjson.OPT_INDENT_2)
    except (orjson.JSONDecodeError, orjson.JSONEncodeError):
        return UNSURE
    if scan is None:
        scan = scan_body(body)
    if (
        not scan.escapes.isdisjoint(_DOUBTFUL_ESCAPES)
        or (scan.long_numbers and _NINETEEN_DIGITS in body.translate(_DIGITS_AS_ZERO))
        or body.count(b":") != indented.count(b":")
        or _TOO_DEEP_LINE in indented
    ):
        return UNSURE
    return data


def parse_json_fully(body: bytes) -> object:
    """``parse_json`` the reference way: every key seen, every problem named with its path."""
    try:
        text = body.decode("utf-8")
        data: object = json.loads(text, object_pairs_hook=_object, parse_constant=_refuse_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        reason = "nested too deep" if isinstance(exc, RecursionError) else str(exc)
        raise InvalidRequest(
            [ErrorDetail("malformed_json", f"The body is not valid UTF-8 JSON: {reason}.")]
        ) from None
    # The full walk, which names paths, costs several times the parse; it runs only when the
    # text has a \u0000 or surrogate escape, or the cheap pass finds something wrong.
    if _SUSPECT_ESCAPE.search(text) is not None or not _cheap_ok(data, 0):
        errors = list(_problems(data, (), 0))
        if errors:
            raise InvalidRequest(errors)
    return data


def _cheap_ok(node: object, depth: int) -> bool:
    """No duplicated key, no nesting deeper than the limit, every number storable; text is
    left to the escape check."""
    if isinstance(node, dict):
        if isinstance(node, _DuplicatedKeys):
            return False
        values: Iterable[object] = node.values()
    elif isinstance(node, list):
        values = node
    else:
        return _number_ok(node)
    if depth >= MAX_JSON_DEPTH:
        return False
    for value in values:
        # Exact type checks, and no call for a string, the commonest value: this pass runs on
        # every body, and these checks halve its cost.
        kind = type(value)
        if kind is str:
            continue
        if kind is dict or kind is list or kind is _DuplicatedKeys:
            if not _cheap_ok(value, depth + 1):
                return False
        elif not _number_ok(value):
            return False
    return True


def _number_ok(value: object) -> bool:
    if type(value) is int:
        return INT64_MIN <= value <= INT64_MAX
    if type(value) is float:
        return math.isfinite(value)
    return True


def json_path(parts: Iterable[str | int]) -> str:
    """``receipt.products[0].name``; ``$`` for the whole body. Keys are shown with any lone
    surrogate escaped, so an error message can always be sent back as JSON."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            key = part.encode("utf-8", "backslashreplace").decode()
            out += f".{key}" if out else key
    return out or "$"


def _problems(node: object, path: tuple[str | int, ...], depth: int) -> Iterator[ErrorDetail]:
    if isinstance(node, str):
        if _BAD_TEXT.search(node):
            yield ErrorDetail(
                "invalid_value",
                f"{json_path(path)}: text may not contain U+0000 or a lone surrogate.",
            )
    elif isinstance(node, bool) or node is None:
        return
    elif isinstance(node, int):
        if not INT64_MIN <= node <= INT64_MAX:
            yield ErrorDetail(
                "invalid_value", f"{json_path(path)}: integer outside the signed 64-bit range."
            )
    elif isinstance(node, float):
        if not math.isfinite(node):
            yield ErrorDetail("invalid_value", f"{json_path(path)}: number too large.")
    elif depth >= MAX_JSON_DEPTH:
        raise InvalidRequest(
            [
                ErrorDetail(
                    "malformed_json",
                    f"{json_path(path)}: nested deeper than {MAX_JSON_DEPTH} levels.",
                )
            ]
        )
    elif isinstance(node, dict):
        if isinstance(node, _DuplicatedKeys):
            yield ErrorDetail(
                "invalid_value", f"{json_path(path)}: the key {node.duplicated!r} appears twice."
            )
        for key, value in node.items():
            if _BAD_TEXT.search(key):
                yield ErrorDetail(
                    "invalid_value",
                    f"{json_path(path)}: a key may not contain U+0000 or a lone surrogate.",
                )
            yield from _problems(value, (*path, key), depth + 1)
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _problems(value, (*path, index), depth + 1)


EARLIEST_MOMENT = datetime(1, 2, 1, tzinfo=UTC)
END_OF_MOMENTS = datetime(9999, 12, 1, tzinfo=UTC)
"""Moments are taken from ``EARLIEST_MOMENT`` up to (not including) ``END_OF_MOMENTS``: years
1–9999 in UTC, a month clear of either end, so that the windows the service computes around a
moment (card matching looks 7 days either side) and its display in Finland's time zone stay
inside the calendar."""


def parse_moment(text: str) -> datetime:
    """An ISO 8601 date-time with a UTC offset (``2026-05-04T12:30:00+03:00``, ``…Z``; a space
    may stand for the ``T``), as an aware datetime in UTC. Every moment a caller sends is read
    here, so that one rule holds everywhere. ``ValueError`` says what is wrong: not such a
    date-time, a date alone, no offset, or a moment outside the calendar the service keeps
    (``0001-01-01T00:00:00+01:00`` is in year 0)."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError("must be an ISO 8601 date-time, e.g. 2026-05-04T12:30:00+03:00") from None
    if "T" not in text.upper() and " " not in text:
        raise ValueError("must be an ISO 8601 date-time (a date alone is not enough)")
    if moment.tzinfo is None:
        raise ValueError("must carry a UTC offset, e.g. +03:00 or Z")
    return moment_in_range(moment)


def moment_in_range(moment: datetime) -> datetime:
    """An aware ``moment`` in UTC, if it lies where ``EARLIEST_MOMENT`` says; ``ValueError``
    otherwise."""
    try:
        utc = moment.astimezone(UTC)
    except OverflowError:
        utc = None
    if utc is None or not EARLIEST_MOMENT <= utc < END_OF_MOMENTS:
        raise ValueError("must lie from 0001-02-01 up to 9999-12-01 in UTC")
    return utc


def query_moment(name: str, text: str) -> datetime:
    """``parse_moment`` for a query parameter: its problem as 400 ``invalid_value``."""
    try:
        return parse_moment(text)
    except ValueError as exc:
        raise InvalidRequest([ErrorDetail("invalid_value", f"{name}: {exc}.")]) from None


def has_nul(text: str) -> bool:
    """True for text no database should store (used where text arrives outside JSON)."""
    return "\x00" in text
