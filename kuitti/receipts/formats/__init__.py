"""The formats a receipt can be rendered in (the read endpoint's ``data_format``) and what a
rendering is. Rendering itself, and its cache, is ``formats/rendering.py``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import assert_never

from kuitti.errors import Conflict
from kuitti.models import Receipt


class DataFormat(StrEnum):
    SERVICE_JSON = "service_json"
    SERVICE_PDF = "service_pdf"
    FINVOICE_XML = "finvoice_xml"
    FINVOICE_PDF = "finvoice_pdf"


@dataclass(frozen=True)
class Rendered:
    content: bytes
    media_type: str
    filename: str = ""


class FinvoiceUnavailable(Conflict):
    code = "finvoice_unavailable"


def _safe_name(number: str) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", number).strip("._-")[:60]
    return name or "receipt"


def filename(receipt: Receipt, fmt: DataFormat) -> str:
    number = _safe_name(receipt.receipt_number)
    match fmt:
        case DataFormat.SERVICE_JSON:
            return f"receipt-{number}.json"
        case DataFormat.SERVICE_PDF:
            return f"receipt-{number}.pdf"
        case DataFormat.FINVOICE_XML:
            return f"finvoice-{number}.xml"
        case DataFormat.FINVOICE_PDF:
            return f"finvoice-{number}.pdf"
        case _:
            assert_never(fmt)
