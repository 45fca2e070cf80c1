"""The receipt document kept as the bytes the merchant posted (docs/security.md, "The receipt
as posted").

``service_json`` and the JSON embedded in ``service_pdf`` are those bytes: whitespace, escapes and
number forms as posted, in the bare form the whole body, in the token form the ``"receipt"``
value. A number kuitti computes with as a float must be one the float holds; every other number
is kept as written. A body kuitti could not keep so that every reader sees what it saw is refused,
and a refusal stores nothing."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from pypdf import PdfReader

from kuitti.models import Partner
from kuitti.receipts.formats import DataFormat
from kuitti.receipts.formats.rendering import cache, render
from kuitti.receipts.validation import parse_receipt_request
from kuitti.services import Services
from tests.factories import auth, make_partner, product_row, receipt_doc, unsaved_receipt
from tests.receipts.test_dry_run import row_counts
from tests.test_cli import run

POST = "/api/v1/receipts/"
VALIDATE = "/api/v1/receipts/validate"
JSON = {"Content-Type": "application/json"}
TOKEN = {"type": "RECEIPT_ID", "namespace": "kauppa", "value": "R-77"}

# Unknown keys with every number form and escape that re-serialising used to change.
ODD_MEMBERS = (
    b'"extra" : {"tiny":1e-400 ,"long" : 1.2345678901234567890,\r\n'
    b'  "big":100000000000000000000.5,"padded":0.1000, "exp":1E2,"negzero":-0,\r\n'
    b'  "slash":"a\\/b", "umlaut":"\\u00e4iti", "raw":"\xc3\xa4iti", "quote":"\\"q\\""},\r\n'
)


def odd_document(doc: dict[str, Any] | None = None) -> bytes:
    """``doc`` as a till might write it: tabs, spaces before commas, escaped non-ASCII, CRLF."""
    text = json.dumps(doc or receipt_doc(), indent="\t", separators=(" ,", " :  "))
    return b"{\r\n\t" + ODD_MEMBERS + text.encode()[1:].replace(b"\n", b"\r\n")


def post(client: httpx.Client, key: str, body: bytes, url: str = POST) -> httpx.Response:
    return client.post(url, content=body, headers={**auth(key), **JSON})


def service_json(client: httpx.Client, key: str, receipt_id: str) -> httpx.Response:
    response = client.get(f"{POST}{receipt_id}/service_json/", headers=auth(key))
    assert response.status_code == 200, response.text
    return response


def embedded_json(client: httpx.Client, key: str, receipt_id: str) -> bytes:
    response = client.get(f"{POST}{receipt_id}/service_pdf/", headers=auth(key))
    assert response.status_code == 200, response.text
    (content,) = PdfReader(io.BytesIO(response.content)).attachments["receipt.json"]
    return content


def token_forms(document: bytes) -> list[bytes]:
    tokens = json.dumps({"tokens": [TOKEN]}).encode()
    return [
        b'{ "attributes" :' + tokens + b',\n  "receipt"  :\t' + document + b" \r\n}\n",
        b'{"receipt":' + document + b',"attributes":' + tokens + b"}",
        # A key may be written with escapes; the span is found by a JSON parser, not by text.
        b'{"attributes":' + tokens + b', "rec\\u0065ipt" : ' + document + b"}",
    ]


def test_the_bare_form_is_kept_byte_for_byte(client: httpx.Client, services: Services) -> None:
    merchant = make_partner(services)
    body = b"  \n" + odd_document() + b"\r\n"
    response = post(client, merchant.api_key, body)
    assert response.status_code == 200, response.text
    receipt_id = response.json()["receipt_id"]
    assert service_json(client, merchant.api_key, receipt_id).content == body
    assert embedded_json(client, merchant.api_key, receipt_id) == body


@pytest.mark.parametrize("form", range(3))
def test_the_token_form_keeps_the_receipt_value(
    client: httpx.Client, services: Services, form: int
) -> None:
    merchant = make_partner(services, namespaces=["kauppa"])
    document = odd_document()
    response = post(client, merchant.api_key, token_forms(document)[form])
    assert response.status_code == 200, response.text
    receipt_id = response.json()["receipt_id"]
    served = service_json(client, merchant.api_key, receipt_id).content
    assert served == document
    assert b"tokens" not in served  # a USER token is a bearer credential: never stored
    assert embedded_json(client, merchant.api_key, receipt_id) == document


def test_an_unchanged_resend_answers_the_original_and_keeps_its_bytes(
    client: httpx.Client, services: Services
) -> None:
    merchant = make_partner(services, namespaces=["kauppa"])
    first, again = token_forms(odd_document())[:2]
    # Equal as JSON, written otherwise: key order and whitespace do not matter.
    compact = json.dumps({"receipt": json.loads(odd_document()), "attributes": {"tokens": [TOKEN]}})
    receipt_id = post(client, merchant.api_key, first).json()["receipt_id"]
    before = service_json(client, merchant.api_key, receipt_id)
    for resend in (again, compact.encode()):
        answer = post(client, merchant.api_key, resend)
        assert answer.status_code == 200, answer.text
        assert answer.json()["receipt_id"] == receipt_id
    after = service_json(client, merchant.api_key, receipt_id)
    assert after.content == before.content == odd_document()
    assert after.headers["etag"] == before.headers["etag"]
    changed = json.loads(odd_document())
    changed["receiptNumber"] = "R-other"
    refused = post(client, merchant.api_key, token_forms(json.dumps(changed).encode())[0])
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"] == "duplicate_receipt_id"


def journey_row(distance: float) -> dict[str, Any]:
    return product_row(
        "Taksimatka",
        unit_price=4350,
        rate="14",
        journey={
            "type": "TAXI",
            "distance": distance,
            "origin": {"name": "Rautatieasema"},
            "destination": {"name": "Lentoasema"},
        },
    )


def journey_doc(distance: bytes) -> bytes:
    """A receipt with a taxi row whose distance is written as ``distance``."""
    text = json.dumps(receipt_doc([journey_row(12345)])).encode()
    assert text.count(b'"distance": 12345') == 1
    return text.replace(b'"distance": 12345', b'"distance": ' + distance)


INEXACT = [b"1.2345678901234567890", b"1e-400", b"100000000000000000000.5", b"1e300", b"0.1e-5000"]
EXACT = [b"0.1000", b"1E2", b"-0", b"-0.0", b"18250.5", b"1.5e3"]


@pytest.mark.parametrize("number", INEXACT)
def test_a_float_kuitti_computes_with_must_hold_the_number(
    client: httpx.Client, services: Services, number: bytes
) -> None:
    merchant = make_partner(services, namespaces=["kauppa"])
    before = row_counts(services)
    document = journey_doc(number)
    bare = post(client, merchant.api_key, document)
    assert bare.status_code == 400, bare.text
    assert bare.json()["error"] == "invalid_value"
    assert bare.json()["decription"].startswith("products[0].journey.distance: ")
    wrapped = post(client, merchant.api_key, token_forms(document)[0])
    assert wrapped.status_code == 400
    assert wrapped.json()["decription"].startswith("receipt.products[0].journey.distance: ")
    # The dry run refuses it alike: what it accepts, the post stores.
    for body, answer in ((document, bare), (token_forms(document)[0], wrapped)):
        dry = post(client, merchant.api_key, body, VALIDATE)
        assert (dry.status_code, dry.json()) == (answer.status_code, answer.json())
    assert row_counts(services) == before


@pytest.mark.parametrize("number", EXACT)
def test_a_float_written_otherwise_is_kept_as_written(
    client: httpx.Client, services: Services, number: bytes
) -> None:
    merchant = make_partner(services)
    document = journey_doc(number)
    dry = post(client, merchant.api_key, document, VALIDATE)
    assert dry.json() == {"valid": True, "warnings": []}
    response = post(client, merchant.api_key, document)
    assert response.status_code == 200, response.text
    assert service_json(client, merchant.api_key, response.json()["receipt_id"]).content == document


def test_the_command_line_dry_run_agrees(services: Services, tmp_path: Path) -> None:
    paths = [tmp_path / "refused.json", tmp_path / "kept.json"]
    for path, number in zip(paths, (INEXACT[0], EXACT[1]), strict=True):
        path.write_bytes(journey_doc(number))
    result = run(services, "receipts", "validate", *map(str, paths), "--json")
    assert result.exit_code == 1, result.output
    refused, kept = json.loads(result.stdout)["files"]
    assert [e["error"] for e in refused["errors"]] == ["invalid_value"]
    assert refused["errors"][0]["decription"].startswith("products[0].journey.distance: ")
    assert kept["valid"] is True


BAD_BODIES = {
    "byte order mark": (b"\xef\xbb\xbf" + json.dumps(receipt_doc()).encode(), "malformed_json"),
    "duplicated key": (
        json.dumps(receipt_doc()).encode()[:-1] + b', "receiptNumber": "R-2"}',
        "invalid_value",
    ),
    "duplicated key in the token form": (
        b'{"receipt":' + json.dumps(receipt_doc()).encode() + b', "receipt": {}}',
        "invalid_value",
    ),
    "lone surrogate escape": (
        json.dumps(receipt_doc(freeText="\\ud800")).encode().replace(b"\\\\", b"\\"),
        "invalid_value",
    ),
    "NUL escape": (
        json.dumps(receipt_doc(freeText="a\x00b")).encode(),
        "invalid_value",
    ),
}


@pytest.mark.parametrize("case", BAD_BODIES)
def test_a_body_not_every_reader_would_read_alike_is_refused(
    client: httpx.Client, services: Services, case: str
) -> None:
    merchant = make_partner(services)
    body, code = BAD_BODIES[case]
    before = row_counts(services)
    response = post(client, merchant.api_key, body)
    assert response.status_code == 400, response.text
    answer = response.json()
    assert (answer[0] if isinstance(answer, list) else answer)["error"] == code
    assert row_counts(services) == before
    dry = post(client, merchant.api_key, body, VALIDATE)
    assert (dry.status_code, dry.json()) == (400, answer)


def test_the_request_carries_the_posted_bytes() -> None:
    document = odd_document()
    for body in token_forms(document):
        request = parse_receipt_request(body, attachments_enabled=False)
        assert request.document_bytes() == document
        assert json.loads(document) == request.document
    assert parse_receipt_request(document, attachments_enabled=False).document_bytes() == document


def test_a_receipt_stored_before_is_served_and_rendered_as_stored() -> None:
    """Stored documents are never rewritten or checked again: one stored compacted, with a
    distance posts are now refused, is served as it is and still renders."""
    receipt = unsaved_receipt(receipt_doc([journey_row(1.7e308)]))
    poster = Partner(id=receipt.partner_id, name="Kauppa Oy", iban="FI2112345600000785")
    cache.clear()
    served = render(receipt, poster, DataFormat.SERVICE_JSON).content
    assert served == receipt.document.encode()
    pdf = render(receipt, poster, DataFormat.SERVICE_PDF, locale="fi").content
    assert PdfReader(io.BytesIO(pdf)).attachments["receipt.json"] == [served]
    assert render(receipt, poster, DataFormat.FINVOICE_PDF, locale="fi").content
