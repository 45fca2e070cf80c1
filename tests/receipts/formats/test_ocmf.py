"""OCMF verification with real key pairs generated here, and its rendering on a read."""

from __future__ import annotations

import json
from decimal import Decimal

import httpx
import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from kuitti.receipts.formats.ocmf import VerificationResult, parse_time, verify
from kuitti.services import Services
from tests.factories import receipt_doc
from tests.receipts.formats.support import (
    assert_valid_finvoice,
    fetch,
    ocmf_key,
    ocmf_payload,
    ocmf_record,
    pdf_text,
    post,
    poster,
    verification,
)


class TestVerify:
    def test_valid_record_and_its_readings(self) -> None:
        key = ocmf_key()
        record = verify(ocmf_record(key), key.public_hex)
        assert record.result is VerificationResult.VALID
        assert record.meter_serial == "METER-0042"
        assert [r.kind for r in record.readings] == ["B", "E"]
        # Values keep their written form (Decimal, never float).
        assert record.readings[0].value == Decimal("1234.500")
        assert str(record.readings[0].value) == "1234.500"
        assert record.readings[0].unit == "kWh"
        assert record.readings[0].time_status == "S"

    def test_base64_key_and_signature(self) -> None:
        key = ocmf_key()
        record = verify(ocmf_record(key, encoding="base64"), key.public_base64)
        assert record.result is VerificationResult.VALID

    def test_hex_encoded_record(self) -> None:
        key = ocmf_key()
        record = verify(ocmf_record(key).encode().hex(), key.public_hex)
        assert record.result is VerificationResult.VALID

    def test_tampered_reading_is_invalid(self) -> None:
        key = ocmf_key()
        good = ocmf_record(key)
        tampered = good.replace('"RV":1246.845', '"RV":1256.845')
        assert tampered != good
        assert verify(tampered, key.public_hex).result is VerificationResult.INVALID

    def test_reserialised_payload_is_invalid(self) -> None:
        key = ocmf_key()
        _, payload, signature = ocmf_record(key).split("|")
        compact = json.dumps(json.loads(payload))  # different bytes, same JSON
        result = verify(f"OCMF|{compact}|{signature}", key.public_hex).result
        assert result is VerificationResult.INVALID

    def test_other_key_is_invalid(self) -> None:
        assert (
            verify(ocmf_record(ocmf_key()), ocmf_key().public_hex).result
            is VerificationResult.INVALID
        )

    @pytest.mark.parametrize(
        ("signed_data", "public_key"),
        [
            ("not ocmf at all", None),
            ("OCMF|{broken|{}", None),
            ("OCMF|{}|not json", None),
            ('OCMF|{"RD":[]}|{"SD":"zz"}', None),
            ('OCMF|{"RD":[]}|{"SA":"RSA-2048-SHA256","SD":"00"}', None),
            ('OCMF|{"RD":[]}|{"SE":"rot13","SD":"00"}', None),
            (None, "not a key"),
            (None, "00ff"),
        ],
    )
    def test_unverifiable_inputs_never_raise(
        self, signed_data: str | None, public_key: str | None
    ) -> None:
        key = ocmf_key()
        record = verify(signed_data or ocmf_record(key), public_key or key.public_hex)
        assert record.result is VerificationResult.UNVERIFIABLE
        assert record.reason

    def test_curve_must_match_the_algorithm(self) -> None:
        key = ocmf_key(ec.SECP384R1())
        record = verify(ocmf_record(key), key.public_hex)  # says secp256r1
        assert record.result is VerificationResult.UNVERIFIABLE
        assert "secp384r1" in (record.reason or "")

    def test_brainpool_curve(self) -> None:
        key = ocmf_key(ec.BrainpoolP256R1())
        payload = ocmf_payload()
        signature = key.private.sign(payload.encode(), ec.ECDSA(hashes.SHA256()))
        signed = f'OCMF|{payload}|{{"SA":"ECDSA-brainpool256r1-SHA256","SD":"{signature.hex()}"}}'
        assert verify(signed, key.public_hex).result is VerificationResult.VALID

    def test_time_format(self) -> None:
        moment = parse_time("2018-07-24T13:22:04,000+0200 S")
        assert moment is not None
        assert moment.isoformat() == "2018-07-24T13:22:04+02:00"
        assert parse_time("yesterday") is None


class TestRendering:
    def test_results_shown_in_every_format(self, client: httpx.Client, services: Services) -> None:
        who = poster(services)
        good, bad = ocmf_key(), ocmf_key()
        tampered = ocmf_record(bad).replace('"RV":1246.845', '"RV":1299.000')
        doc = receipt_doc(
            verifications=[
                verification(good),
                {**verification(bad, end_record=tampered), "transactionId": "TX-BAD"},
                {**verification(good, end_record="garbage"), "transactionId": "TX-UGLY"},
            ]
        )
        receipt_id = post(client, who, doc)
        text = pdf_text(fetch(client, who, receipt_id, "service_pdf").content)
        assert "Signature valid" in text
        assert "Signature invalid" in text
        assert "Could not verify" in text
        assert "Energy: 12.345 kWh" in text
        root = assert_valid_finvoice(fetch(client, who, receipt_id, "finvoice_xml").content)
        free = " ".join(t.text or "" for t in root.findall("InvoiceDetails/InvoiceFreeText"))
        assert "TX-2026-0042: signature valid" in free
        assert "TX-BAD: signature invalid" in free
        assert "TX-UGLY: signature could not verify" in free
