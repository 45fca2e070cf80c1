"""Signed receipts: every stored receipt carries a signature over the bytes service_json serves,
verifiable against the published keys, through key rotations, the backfill and the CLI."""

from __future__ import annotations

import io
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import orjson
from joserfc import jws
from joserfc.jwk import ECKey
from joserfc.util import urlsafe_b64decode
from pypdf import PdfReader
from sqlalchemy import update

from kuitti import signatures
from kuitti.clock import FrozenClock
from kuitti.models import Receipt
from kuitti.services import Services
from tests.factories import auth, make_partner, receipt_doc
from tests.test_cli import run, run_json

LIST = "/api/v1/receipts/"


def post(client: httpx.Client, key: str, number: str = "R-1") -> str:
    answer = client.post(LIST, json=receipt_doc(receiptNumber=number), headers=auth(key))
    assert answer.status_code == 200, answer.text
    receipt_id: str = answer.json()["receipt_id"]
    return receipt_id


def published(client: httpx.Client) -> dict[str, Any]:
    answer = client.get(signatures.JWKS_PATH)
    assert answer.status_code == 200
    assert "max-age" in answer.headers["cache-control"]
    keys: dict[str, Any] = answer.json()
    return keys


def read(client: httpx.Client, key: str, receipt_id: str, fmt: str) -> httpx.Response:
    answer = client.get(f"{LIST}{receipt_id}/{fmt}/", headers=auth(key))
    assert answer.status_code == 200, answer.text
    return answer


def saved_receipt(client: httpx.Client, key: str, receipt_id: str) -> bytes:
    return read(client, key, receipt_id, "signed_json").content


FORMATS = ("service_json", "service_pdf")  # what shows a receipt's signature


def pdf_attachments(answer: httpx.Response) -> dict[str, bytes]:
    attached = PdfReader(io.BytesIO(answer.content)).attachments
    return {name: contents[0] for name, contents in attached.items()}


def test_service_json_carries_the_signature_of_its_exact_bytes(
    client: httpx.Client, services: Services
) -> None:
    merchant = make_partner(services)
    receipt_id = post(client, merchant.api_key)
    answer = read(client, merchant.api_key, receipt_id, "service_json")
    verdict = signatures.verify(
        answer.content, answer.headers[signatures.SIGNATURE_HEADER], published(client)
    )
    assert verdict.valid, verdict
    assert verdict.header is not None
    assert verdict.header["receipt_id"] == receipt_id
    assert verdict.header["partner_id"] == str(merchant.partner.id)
    assert verdict.header["iss"] == services.settings.issuer
    assert verdict.header["typ"] == "receipt+jws"
    assert verdict.header["kid"] == published(client)["keys"][0]["kid"]


def test_any_one_byte_change_of_a_saved_receipt_is_detected(
    client: httpx.Client, services: Services
) -> None:
    merchant = make_partner(services)
    saved = saved_receipt(client, merchant.api_key, post(client, merchant.api_key))
    keys = published(client)
    assert signatures.verify_saved(saved, keys)[0].valid
    data = orjson.loads(saved)
    document = data["payload"].encode()
    signature = f"{data['protected']}..{data['signature']}"
    for position in range(len(document)):
        changed = bytearray(document)
        changed[position] ^= 0x01
        assert signatures.verify(bytes(changed), signature, keys).status == signatures.TAMPERED
    for position in range(0, len(signature), 3):
        if signature[position] == ".":
            continue
        swapped = "A" if signature[position] != "A" else "B"
        changed_signature = signature[:position] + swapped + signature[position + 1 :]
        assert not signatures.verify(document, changed_signature, keys).valid


def test_a_signature_cannot_be_moved_to_another_receipt(
    client: httpx.Client, services: Services
) -> None:
    merchant = make_partner(services)
    first = read(client, merchant.api_key, post(client, merchant.api_key, "R-1"), "service_json")
    second = read(client, merchant.api_key, post(client, merchant.api_key, "R-2"), "service_json")
    keys = published(client)
    moved = signatures.verify(second.content, first.headers[signatures.SIGNATURE_HEADER], keys)
    assert moved.status == signatures.TAMPERED


def test_receipts_verify_after_two_rotations_and_the_first_key_retired(
    client: httpx.Client, services: Services
) -> None:
    merchant = make_partner(services)
    before = post(client, merchant.api_key, "R-1")
    first_kid = run_json(services, "receipts", "keys", "list")["keys"][0]["kid"]
    kids = [run_json(services, "receipts", "keys", "rotate")["kid"]]
    between = post(client, merchant.api_key, "R-2")
    kids.append(run_json(services, "receipts", "keys", "rotate")["kid"])
    after = post(client, merchant.api_key, "R-3")

    listed = run_json(services, "receipts", "keys", "list")["keys"]
    assert [k["kid"] for k in listed] == [kids[1], kids[0], first_kid]
    assert [k["status"] for k in listed] == ["signing", "retired", "retired"]
    assert all(k["published_until"] for k in listed[1:])
    keys = published(client)
    assert [(k["kid"], k["status"]) for k in keys["keys"]] == [
        (k["kid"], k["status"]) for k in listed
    ]
    for receipt_id, kid, status in (
        (before, first_kid, "retired"),
        (between, kids[0], "retired"),
        (after, kids[1], "signing"),
    ):
        verdict, _ = signatures.verify_saved(
            saved_receipt(client, merchant.api_key, receipt_id), keys
        )
        assert verdict.valid, verdict
        assert verdict.header is not None
        assert (verdict.header["kid"], verdict.key_status) == (kid, status)


def test_a_retired_key_is_published_for_the_retention_period_only(
    client: httpx.Client, services: Services, clock: FrozenClock
) -> None:
    merchant = make_partner(services)
    saved = saved_receipt(client, merchant.api_key, post(client, merchant.api_key))
    run_json(services, "receipts", "keys", "rotate")
    keys = published(client)
    assert signatures.verify_saved(saved, keys)[0].key_status == "retired"
    retired = run_json(services, "receipts", "keys", "list")["keys"][1]
    until = datetime.fromisoformat(retired["published_until"])
    assert until - datetime.fromisoformat(retired["retired_at"]) == signatures.RETENTION
    clock.set(until - timedelta(seconds=1))
    assert len(published(client)["keys"]) == 2
    clock.set(until)
    later = published(client)
    assert len(later["keys"]) == 1
    assert signatures.verify_saved(saved, later)[0].status == signatures.UNKNOWN_KEY


def test_the_backfill_signs_older_receipts_and_resumes(
    client: httpx.Client, services: Services
) -> None:
    merchant = make_partner(services)
    ids = [post(client, merchant.api_key, f"R-{n}") for n in range(5)]
    with services.db.session() as session:
        session.execute(update(Receipt).values(signature=None))
    unsigned = client.get(f"{LIST}{ids[0]}/signed_json/", headers=auth(merchant.api_key))
    assert unsigned.status_code == 409
    assert unsigned.json()["error"] == "receipt_not_signed"

    first = run_json(services, "receipts", "sign-existing", "--batch", "2", "--limit", "3")
    rest = run_json(services, "receipts", "sign-existing", "--batch", "2")
    again = run_json(services, "receipts", "sign-existing")
    assert (first["signed"], rest["signed"], again["signed"]) == (3, 2, 0)
    keys = published(client)
    with services.db.session(write=False) as session:
        for receipt_id in ids:
            receipt = session.get(Receipt, uuid.UUID(receipt_id))
            assert receipt is not None
            assert receipt.signature is not None
            assert signatures.verify(receipt.document.encode(), receipt.signature, keys).valid


def test_a_rendering_made_before_the_backfill_is_not_served_after_it(
    client: httpx.Client, services: Services
) -> None:
    """``service_json`` and ``service_pdf`` read (and cached) while a receipt had no signature
    carry it once the backfill has signed it, under another ETag."""
    merchant = make_partner(services)
    receipt_id = post(client, merchant.api_key)
    with services.db.session() as session:
        session.execute(update(Receipt).values(signature=None))
    before = {fmt: read(client, merchant.api_key, receipt_id, fmt) for fmt in FORMATS}
    assert signatures.SIGNATURE_HEADER not in before["service_json"].headers
    assert signatures.SIGNED_FILE not in pdf_attachments(before["service_pdf"])

    assert run_json(services, "receipts", "sign-existing")["signed"] == 1
    for fmt in FORMATS:
        again = client.get(
            f"{LIST}{receipt_id}/{fmt}/",
            headers={**auth(merchant.api_key), "If-None-Match": before[fmt].headers["etag"]},
        )
        assert again.status_code == 200, fmt  # not 304: the answer has changed
        assert again.headers["etag"] != before[fmt].headers["etag"]
    after = read(client, merchant.api_key, receipt_id, "service_json")
    assert after.content == before["service_json"].content
    verdict = signatures.verify(
        after.content, after.headers[signatures.SIGNATURE_HEADER], published(client)
    )
    assert verdict.valid, verdict
    pdf = read(client, merchant.api_key, receipt_id, "service_pdf")
    saved = pdf_attachments(pdf)[signatures.SIGNED_FILE]
    assert signatures.verify_saved(saved, published(client))[0].valid


def test_sign_writes_the_header_of_its_members_in_their_order() -> None:
    """``sign`` builds the protected header from a prebuilt start: it is the JSON of its
    members in the order docs/signing.md lists them, escapes included, and any JOSE library
    verifies the signature."""
    key = ECKey.generate_key(signatures.CURVE, auto_kid=True)
    assert key.kid is not None
    loaded = signatures.LoadedKey(key.kid, key)
    document = b' {"receiptNumber" : "R-\\u00e4",\r\n "total":1E2}\n'
    receipt_id, partner_id = uuid.uuid4(), uuid.uuid4()
    issuer = 'https://kuitti.example/ä/"x"'
    now = datetime(2026, 11, 29, 8, 30, 15, 999999, tzinfo=UTC)
    signature = signatures.sign(
        loaded, document, receipt_id=receipt_id, partner_id=partner_id, issuer=issuer, now=now
    )
    protected, _, signed = signature.partition("..")
    assert urlsafe_b64decode(protected.encode()) == orjson.dumps(
        {
            "alg": "ES256",
            "b64": False,
            "crit": ["b64"],
            "typ": "receipt+jws",
            "kid": key.kid,
            "iat": 1795941015,
            "iss": issuer,
            "receipt_id": str(receipt_id),
            "partner_id": str(partner_id),
        }
    )
    assert len(urlsafe_b64decode(signed.encode())) == 64  # R || S
    public = ECKey.import_key(key.as_dict(private=False))
    jws.deserialize_compact(
        signature, public, payload=document, registry=signatures.REGISTRY
    )  # raises unless it verifies
    keys = {"keys": [key.as_dict(private=False)]}
    assert signatures.verify(document, signature, keys).valid
    assert not signatures.verify(document + b" ", signature, keys).valid


def test_kuitti_receipts_verify(client: httpx.Client, services: Services, tmp_path: Path) -> None:
    merchant = make_partner(services)
    receipt_id = post(client, merchant.api_key)
    good = tmp_path / "good.json"
    good.write_bytes(saved_receipt(client, merchant.api_key, receipt_id))
    bad = tmp_path / "bad.json"
    bad.write_bytes(good.read_bytes().replace(b"R-1", b"R-2"))
    keys = tmp_path / "keys.json"
    keys.write_bytes(orjson.dumps(published(client)))

    ok = run(services, "receipts", "verify", str(good), "--keys", str(keys))
    assert ok.exit_code == 0, ok.output
    assert f"receipt {receipt_id}" in ok.output
    online = run(
        services,
        "receipts",
        "verify",
        str(good),
        "--keys",
        str(client.base_url).rstrip("/") + signatures.JWKS_PATH,
        "--json",
    )
    assert online.exit_code == 0, online.output
    assert orjson.loads(online.stdout)["files"][0]["receipt_id"] == receipt_id

    mixed = run(services, "receipts", "verify", str(good), str(bad), "--keys", str(keys), "--json")
    assert mixed.exit_code == 1
    data = orjson.loads(mixed.stdout)
    assert data["valid"] is False
    assert [f["status"] for f in data["files"]] == ["valid", "tampered"]


def test_the_verify_page(client: httpx.Client, services: Services) -> None:
    merchant = make_partner(services)
    receipt_id = post(client, merchant.api_key)
    saved = saved_receipt(client, merchant.api_key, receipt_id)
    form = client.get("/verify", headers={"Accept-Language": "fi"})
    assert form.status_code == 200
    assert "Tarkista kuitti" in form.text
    token = form.text.split('name="csrf_token" value="')[1].split('"')[0]

    genuine = client.post(
        "/verify?lang=en", data={"csrf_token": token}, files={"file": ("r.json", saved)}
    )
    assert genuine.status_code == 200, genuine.text
    assert "Genuine" in genuine.text
    assert services.settings.issuer in genuine.text
    tampered = client.post(
        "/verify?lang=sv",
        data={"csrf_token": token, "saved": saved.decode().replace("R-1", "R-2")},
    )
    assert tampered.status_code == 422
    assert "Ändrat" in tampered.text
    forged = client.post("/verify", data={"saved": saved.decode()})
    assert forged.status_code == 403  # no CSRF token: nothing checked

    document = read(client, merchant.api_key, receipt_id, "service_json").content
    path = f"/verify?r={receipt_id}&h={signatures.fingerprint(document)}&lang=en"
    scanned = client.get(path)
    assert scanned.status_code == 200
    assert "kuitti holds this receipt unchanged" in scanned.text
    wrong = client.get(f"/verify?r={receipt_id}&h=AAAAAAAAAAAA")
    assert wrong.status_code == 404


def test_the_link_page_says_who_signed_the_receipt_only_while_it_verifies(
    client: httpx.Client, services: Services
) -> None:
    merchant = make_partner(services)
    answer = client.post(LIST, json=receipt_doc(), headers=auth(merchant.api_key))
    assert answer.status_code == 200, answer.text
    page_url = answer.json()["receipt_web_url"]
    issuer = services.settings.issuer
    for lang, wanted in (
        ("fi", f"Allekirjoittanut {issuer}, tarkistettu"),
        ("sv", f"Signerat av {issuer}, kontrollerat"),
        ("en", f"Signed by {issuer}, verified"),
    ):
        page = client.get(page_url, params={"lang": lang})
        assert page.status_code == 200
        assert wanted in page.text
    with services.db.session() as session:
        receipt = session.get(Receipt, uuid.UUID(answer.json()["receipt_id"]))
        assert receipt is not None
        receipt.document = receipt.document.replace("Kahvi", "Kahwi")
    assert "verified" not in client.get(page_url, params={"lang": "en"}).text
