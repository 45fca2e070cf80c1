"""JSON bodies that can be kept exactly as posted, parsed once for every JSON route.

A receipt is stored as posted, so a body must survive a round trip unchanged on both databases.
Refused, anywhere in the body, known keys or not (see docs/security.md):

- bytes that are not UTF-8 (a UTF-16 body among them), or not RFC 8259 JSON: ``malformed_json``;
- ``NaN``/``Infinity``, and nesting deeper than ``MAX_JSON_DEPTH``: ``malformed_json``;
- a string or key with U+0000 or a lone surrogate (``"\\ud800"``), an integer outside the signed
  64-bit range, a number too large for a float (``1e400``), an object with the same key twice:
  ``invalid_value`` naming the JSON path.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator

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


def parse_json(body: bytes) -> object:
    """The body as JSON that can be stored exactly; ``InvalidRequest`` otherwise."""
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
        if isinstance(value, dict | list):
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


def has_nul(text: str) -> bool:
    """True for text no database should store (used where text arrives outside JSON)."""
    return "\x00" in text
