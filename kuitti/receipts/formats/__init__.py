"""One receipt document, many renderings (Endpoint 3's ``data_format``)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import assert_never

from kuitti.errors import Conflict
from kuitti.models import Partner, Receipt


class DataFormat(StrEnum):
    SERVICE_JSON = "service_json"
    SERVICE_PDF = "service_pdf"
    FINVOICE_XML = "finvoice_xml"
    FINVOICE_PDF = "finvoice_pdf"


@dataclass(frozen=True)
class Rendered:
    content: bytes
    media_type: str


class FinvoiceUnavailable(Conflict):
    code = "finvoice_unavailable"


def render(receipt: Receipt, poster: Partner, fmt: DataFormat) -> Rendered:
    """The receipt in the requested format. ``poster`` is the partner that posted it (Finvoice
    needs its bank account)."""
    match fmt:
        case DataFormat.SERVICE_JSON:
            return Rendered(receipt.document.encode(), "application/json")
        case DataFormat.SERVICE_PDF | DataFormat.FINVOICE_XML | DataFormat.FINVOICE_PDF:
            raise NotImplementedError(f"{fmt} is built by the receipt formats work")
        case _:
            assert_never(fmt)
