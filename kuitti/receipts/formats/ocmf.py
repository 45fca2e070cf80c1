"""OCMF (Open Charge Metering Format) records: parse, verify, and read the metered values.

A record is ``OCMF|<payload JSON>|<signature JSON>``. The signature is ECDSA over the payload's
exact bytes as received (never re-serialise the JSON before verifying). The signature JSON names
the algorithm ``SA`` (default ``ECDSA-secp256r1-SHA256``), the encoding ``SE`` (``hex`` default, or
``base64``) and the format ``SM`` (``application/x-der`` default). The public key comes with the
receipt as DER SubjectPublicKeyInfo, hex or base64 (PEM is accepted too).

Nothing here raises on bad input: every failure becomes a result of ``INVALID`` (the signature
does not match the data) or ``UNVERIFIABLE`` (the record, key or algorithm cannot be checked),
with a short reason. A key printed on the receipt proves integrity, not who signed; the pages say
so.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

DEFAULT_ALGORITHM = "ECDSA-secp256r1-SHA256"
MAX_RECORD_CHARS = 100_000

CURVES: dict[str, type[ec.EllipticCurve]] = {
    "secp192r1": ec.SECP192R1,
    "secp256r1": ec.SECP256R1,
    "secp256k1": ec.SECP256K1,
    "secp384r1": ec.SECP384R1,
    "brainpool256r1": ec.BrainpoolP256R1,
    "brainpoolp256r1": ec.BrainpoolP256R1,
    "brainpool384r1": ec.BrainpoolP384R1,
    "brainpoolp384r1": ec.BrainpoolP384R1,
}
HASHES: dict[str, type[hashes.HashAlgorithm]] = {
    "SHA256": hashes.SHA256,
    "SHA384": hashes.SHA384,
    "SHA512": hashes.SHA512,
}

_TIME_RE = re.compile(
    r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:[,.](\d{1,6}))?([+-]\d{2}):?(\d{2})(?:\s+([UISR]))?$"
)


class VerificationResult(StrEnum):
    VALID = "valid"
    INVALID = "invalid"
    UNVERIFIABLE = "could not verify"


@dataclass(frozen=True, slots=True)
class Reading:
    """One ``RD`` entry: when, what kind (``TX``: B begin, E end, …), value and unit."""

    time: datetime | None
    time_text: str | None
    time_status: str | None
    kind: str | None
    value: Decimal | None
    unit: str | None
    obis: str | None
    status: str | None
    error_flags: str | None


@dataclass(frozen=True, slots=True)
class OcmfRecord:
    result: VerificationResult
    reason: str | None = None
    algorithm: str | None = None
    format_version: str | None = None
    pagination: str | None = None
    meter_vendor: str | None = None
    meter_model: str | None = None
    meter_serial: str | None = None
    charge_point: str | None = None
    identification: str | None = None
    tariff: str | None = None
    readings: tuple[Reading, ...] = field(default_factory=tuple)


def _text(value: object, limit: int = 200) -> str | None:
    if value is None or isinstance(value, dict | list):
        return None
    text = str(value).strip()
    return text[:limit] if text else None


def parse_time(text: str) -> datetime | None:
    """An OCMF time such as ``2018-07-24T13:22:04,000+0200 S`` as an aware datetime."""
    match = _TIME_RE.match(text.strip())
    if not match:
        return None
    base, fraction, hours, minutes, _status = match.groups()
    iso = f"{base}.{(fraction or '0').ljust(6, '0')}{hours}:{minutes}"
    try:
        return datetime.fromisoformat(iso)
    except ValueError:
        return None


def _readings(payload: dict[str, Any]) -> tuple[Reading, ...]:
    entries = payload.get("RD")
    if not isinstance(entries, list):
        return ()
    readings: list[Reading] = []
    for entry in entries[:100]:
        if not isinstance(entry, dict):
            continue
        time_text = _text(entry.get("TM"))
        status = None
        if time_text and time_text[-1] in "UISR" and time_text[-2:-1] == " ":
            status = time_text[-1]
        raw_value = entry.get("RV")
        value = raw_value if isinstance(raw_value, Decimal) else None
        if isinstance(raw_value, str):
            try:
                value = Decimal(raw_value)
            except ArithmeticError:
                value = None
        if value is not None and not value.is_finite():
            value = None
        readings.append(
            Reading(
                time=parse_time(time_text) if time_text else None,
                time_text=time_text,
                time_status=status,
                kind=_text(entry.get("TX"), 4),
                value=value,
                unit=_text(entry.get("RU"), 16),
                obis=_text(entry.get("RI"), 40),
                status=_text(entry.get("ST"), 8),
                error_flags=_text(entry.get("EF"), 40),
            )
        )
    return tuple(readings)


def load_public_key(text: str) -> ec.EllipticCurvePublicKey:
    """A DER SubjectPublicKeyInfo given as hex, base64 or PEM. Raises ValueError."""
    text = text.strip()
    if text.startswith("-----BEGIN"):
        key = serialization.load_pem_public_key(text.encode())
    else:
        compact = "".join(text.split())
        try:
            der = bytes.fromhex(compact)
        except ValueError:
            try:
                der = base64.b64decode(compact, validate=True)
            except binascii.Error:
                raise ValueError("the public key is neither hex nor base64") from None
        key = serialization.load_der_public_key(der)
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise ValueError("the public key is not an elliptic-curve key")
    return key


def _algorithm(name: str) -> tuple[type[ec.EllipticCurve], type[hashes.HashAlgorithm]]:
    parts = name.split("-")
    if len(parts) != 3 or parts[0].upper() != "ECDSA":
        raise ValueError(f"unsupported signature algorithm {name[:60]!r}")
    curve = CURVES.get(parts[1].lower())
    digest = HASHES.get(parts[2].upper())
    if curve is None or digest is None:
        raise ValueError(f"unsupported signature algorithm {name[:60]!r}")
    return curve, digest


def _split(signed_data: str) -> list[str]:
    text = signed_data.strip()
    if not text.startswith("OCMF|"):
        # Some meters hand the whole record over hex-encoded.
        try:
            text = bytes.fromhex(text).decode("utf-8").strip()
        except ValueError:
            raise ValueError("not an OCMF record (it must start with OCMF|)") from None
        if not text.startswith("OCMF|"):
            raise ValueError("not an OCMF record (it must start with OCMF|)")
    parts = text.split("|")
    if len(parts) not in (3, 4):
        raise ValueError("an OCMF record has the sections OCMF|payload|signature")
    return parts


def verify(signed_data: str, public_key: str) -> OcmfRecord:
    """Parse and verify one OCMF record with ``public_key``. Never raises."""
    if len(signed_data) > MAX_RECORD_CHARS:
        return OcmfRecord(VerificationResult.UNVERIFIABLE, "the record is too long")
    try:
        parts = _split(signed_data)
    except ValueError as exc:
        return OcmfRecord(VerificationResult.UNVERIFIABLE, str(exc))
    payload_text, signature_text = parts[1], parts[2]
    try:
        payload = json.loads(payload_text, parse_float=Decimal)
    except ValueError:
        payload = None
    if not isinstance(payload, dict):
        return OcmfRecord(VerificationResult.UNVERIFIABLE, "the payload is not a JSON object")
    described: dict[str, Any] = {
        "format_version": _text(payload.get("FV"), 16),
        "pagination": _text(payload.get("PG"), 16),
        "meter_vendor": _text(payload.get("MV")),
        "meter_model": _text(payload.get("MM")),
        "meter_serial": _text(payload.get("MS")),
        "charge_point": _text(payload.get("CI")),
        "identification": _text(payload.get("ID")),
        "tariff": _text(payload.get("TT")),
        "readings": _readings(payload),
    }
    try:
        signature = json.loads(signature_text)
    except ValueError:
        signature = None
    if not isinstance(signature, dict):
        return OcmfRecord(
            VerificationResult.UNVERIFIABLE, "the signature is not a JSON object", **described
        )
    algorithm = str(signature.get("SA") or DEFAULT_ALGORITHM)
    described["algorithm"] = algorithm[:60]
    try:
        curve, digest = _algorithm(algorithm)
        encoding = str(signature.get("SE") or "hex").lower()
        mime = str(signature.get("SM") or "application/x-der").lower()
        if mime != "application/x-der":
            raise ValueError(f"unsupported signature format {mime[:60]!r}")
        encoded = signature.get("SD")
        if not isinstance(encoded, str) or not encoded:
            raise ValueError("the signature has no SD value")
        if encoding == "hex":
            signature_bytes = bytes.fromhex(encoded)
        elif encoding == "base64":
            signature_bytes = base64.b64decode(encoded, validate=True)
        else:
            raise ValueError(f"unsupported signature encoding {encoding[:20]!r}")
        key = load_public_key(public_key)
        if not isinstance(key.curve, curve):
            raise ValueError(f"the public key is on {key.curve.name}, not the curve of {algorithm}")
    except (ValueError, binascii.Error, UnsupportedAlgorithm) as exc:
        return OcmfRecord(VerificationResult.UNVERIFIABLE, str(exc)[:200], **described)
    try:
        key.verify(signature_bytes, payload_text.encode("utf-8"), ec.ECDSA(digest()))
    except InvalidSignature:
        return OcmfRecord(
            VerificationResult.INVALID, "the signature does not match the data", **described
        )
    except ValueError as exc:  # e.g. malformed DER
        return OcmfRecord(VerificationResult.INVALID, str(exc)[:200], **described)
    return OcmfRecord(VerificationResult.VALID, None, **described)


def combine(results: list[VerificationResult]) -> VerificationResult:
    """One result for several records: invalid wins, then could-not-verify, else valid."""
    if not results:
        return VerificationResult.UNVERIFIABLE
    if VerificationResult.INVALID in results:
        return VerificationResult.INVALID
    if VerificationResult.UNVERIFIABLE in results:
        return VerificationResult.UNVERIFIABLE
    return VerificationResult.VALID
