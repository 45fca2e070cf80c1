"""The formats a receipt can be rendered in (the read endpoint's ``data_format``) and what a
rendering is. Each format's media type, file name and renderer are a row of
``formats/rendering.py``'s ``FORMATS``, beside the rendering cache."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from kuitti.errors import Conflict


class DataFormat(StrEnum):
    SERVICE_JSON = "service_json"
    SERVICE_PDF = "service_pdf"
    FINVOICE_XML = "finvoice_xml"
    FINVOICE_PDF = "finvoice_pdf"
    SIGNED_JSON = "signed_json"


@dataclass(frozen=True)
class Rendered:
    content: bytes
    media_type: str
    filename: str = ""
    signature: str | None = None
    """The detached JWS of ``content`` (``service_json`` only; ``kuitti.signatures``)."""


class FinvoiceUnavailable(Conflict):
    code = "finvoice_unavailable"


class NotSignedYet(Conflict):
    code = "receipt_not_signed"


def safe_name(number: str) -> str:
    """A receipt number as part of a file name."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", number).strip("._-")[:60]
    return name or "receipt"
