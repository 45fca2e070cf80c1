"""Receipt signatures: the keys that sign receipts, the signature of a stored receipt, and its
verification (docs/signing.md says the format).

A stored receipt's ``signature`` is a JWS (RFC 7515) over the exact UTF-8 bytes of its
``document``, which ``service_json`` serves as they are: detached, with an unencoded payload
(RFC 7797, ``"b64": false``), so the signature is a few hundred bytes beside the document
rather than a Base64 copy of it, and the document a person saves is the one signed. The
protected header names the key (``kid``, the RFC 7638 thumbprint), the moment (``iat``), the
service (``iss``, ``KUITTI_PUBLIC_URL``), the receipt and the partner that posted it, so a
signature cannot be moved to another receipt.

ES256 only (``ALLOWED``): measured against Ed25519 with joserfc and cryptography, it signs a
60-row receipt for less CPU and verifies for less (``bench/signing.py``); EdDSA is deprecated
as an algorithm name (RFC 9864). The keys are apart from the OAuth token keys and kept the same
way: in the database so every instance signs alike, the private key sealed with the server
secret. ``rotate`` makes a new key sign and retires the others: a retired key signs no more and
stays published, marked retired, for ``RETENTION``.
"""

from __future__ import annotations

import base64
import hashlib
import threading
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import orjson
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import Prehashed, decode_dss_signature
from joserfc import jws
from joserfc.errors import JoseError
from joserfc.jwk import ECKey
from joserfc.jws import JWSRegistry
from joserfc.registry import HeaderParameter
from joserfc.util import urlsafe_b64decode
from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from kuitti import locks, receipt_log
from kuitti.clock import iso_utc
from kuitti.config import Settings
from kuitti.db import Database, Read
from kuitti.models import Receipt, ReceiptSigningKey
from kuitti.security import ES256, SecretBox, new_es256_key, open_key

ALGORITHM = ES256
ALLOWED = (ALGORITHM,)
CURVE = "P-256"
_PREHASHED = ec.ECDSA(Prehashed(hashes.SHA256()))
TYP = "receipt+jws"
# Finnish bookkeeping keeps vouchers about six years after the financial year: eight years
# covers the longest case with a margin.
RETENTION = timedelta(days=8 * 366)
JWKS_PATH = "/.well-known/receipt-signing-keys.json"
SIGNED_MEDIA_TYPE = "application/jose+json"
SIGNATURE_HEADER = "Receipt-Signature"  # service_json's answer: the detached JWS
VERIFY_PATH = "/verify"
SIGNED_FILE = "receipt.signed.json"  # a receipt PDF's attachment: its signed_json
FINGERPRINT_CHARS = 12


class _Registry(JWSRegistry):
    # A receipt body may be as large as KUITTI_MAX_BODY_BYTES allows; the header is ours.
    max_payload_length = 64 * 1024 * 1024
    max_header_length = 2048


REGISTRY = _Registry(
    header_registry={
        "iss": HeaderParameter("Issuer: the service's public URL", "str", required=True),
        "iat": HeaderParameter("Issued at (seconds since the epoch)", "int", required=True),
        "receipt_id": HeaderParameter("The receipt signed", "str", required=True),
        "partner_id": HeaderParameter("The partner that posted it", "str", required=True),
    },
    algorithms=ALLOWED,
)


@dataclass(frozen=True)
class LoadedKey:
    """A signing key opened in this process, with what ``sign`` needs of it made once: the
    ``cryptography`` key object and the protected header's JSON up to its first member that
    changes from receipt to receipt."""

    kid: str
    private: ECKey
    ecdsa: ec.EllipticCurvePrivateKey = field(init=False, repr=False, compare=False)
    header_start: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        private = self.private.private_key
        assert isinstance(private, ec.EllipticCurvePrivateKey)  # an ES256 key's private half
        fixed = {"alg": ALGORITHM, "b64": False, "crit": ["b64"], "typ": TYP, "kid": self.kid}
        object.__setattr__(self, "ecdsa", private)
        object.__setattr__(self, "header_start", orjson.dumps(fixed)[:-1] + b',"iat":')


_opened: dict[str, LoadedKey] = {}  # private keys never change for a kid
_opened_lock = threading.Lock()


def create_key(session: Session, box: SecretBox, *, now: datetime) -> ReceiptSigningKey:
    row = ReceiptSigningKey(**new_es256_key(box).columns(), created_at=now)
    session.add(row)
    session.flush()
    return row


def rotate(session: Session, box: SecretBox, *, now: datetime) -> ReceiptSigningKey:
    """A new key signs from now on; every key that signed until now is retired."""
    locks.acquire(session, "receipt-signing-key")
    for old in session.scalars(select(ReceiptSigningKey).where(_signing())):
        old.retired_at = now
        old.published_until = now + RETENTION
    return create_key(session, box, now=now)


def _signing() -> Any:
    return ReceiptSigningKey.retired_at.is_(None)


def current_key(session: Session, box: SecretBox, *, now: datetime) -> LoadedKey:
    """The key that signs (made on first use)."""
    row = _newest(session)
    if row is None:
        locks.acquire(session, "receipt-signing-key")
        row = _newest(session) or create_key(session, box, now=now)
    with _opened_lock:
        loaded = _opened.get(row.kid)
    if loaded is None:
        loaded = LoadedKey(row.kid, open_key(box, row.private_jwk_sealed))
        with _opened_lock:
            _opened[row.kid] = loaded
    return loaded


def _newest(session: Session) -> ReceiptSigningKey | None:
    return session.scalar(
        select(ReceiptSigningKey)
        .where(_signing())
        .order_by(ReceiptSigningKey.created_at.desc(), ReceiptSigningKey.kid)
        .limit(1)
    )


class Signer:
    """A process's signing key for the ingest writer's postings, used on the event loop: loaded
    from the database (a blocking call, ``load``) on first use and again after ``forget``. The
    writer checks in its transaction that the key still signs (``SIGNING_KID_READ``); a posting
    signed with a key rotated meanwhile is prepared again with the new one."""

    def __init__(self, db: Database, settings: Settings) -> None:
        self._db = db
        self._box = SecretBox(settings.resolved_secret_key)
        self.key: LoadedKey | None = None

    def load(self, now: datetime) -> LoadedKey:
        """Runs in a thread: the key it returns is its own, whatever ``forget`` does meanwhile
        on the event loop."""
        with self._db.session() as session:
            key = current_key(session, self._box, now=now)
        self.key = key
        return key

    def forget(self) -> None:
        self.key = None


_SIGNING_KID = (
    select(ReceiptSigningKey.kid)
    .where(ReceiptSigningKey.retired_at.is_(None))
    .order_by(ReceiptSigningKey.created_at.desc(), ReceiptSigningKey.kid)
    .limit(1)
)


SIGNING_KID_READ: Read = (_SIGNING_KID, {})
"""Which key signs now. The ingest writer reads it once a batch, in its transaction, as a
prebuilt statement on the driver (``session.execute`` costs about 0.3 ms of CPU more) sent
together with the batch's key holders' reads (``Database.session_rows_together``)."""


def kid_read(rows: list[tuple[Any, ...]]) -> str | None:
    """The kid of the key that signs now (None before the first), from the rows of
    ``SIGNING_KID_READ``."""
    return str(rows[0][0]) if rows else None


def sign(
    key: LoadedKey,
    document: bytes,
    *,
    receipt_id: uuid.UUID,
    partner_id: uuid.UUID,
    issuer: str,
    now: datetime,
) -> str:
    """The detached JWS of ``document`` (``header..signature``).

    Made here with ``cryptography`` rather than by joserfc's ``serialize_compact`` (the same
    bytes, ``tests/receipts/test_signing.py``): the header's JSON is the key's prebuilt start
    and this receipt's members, in the order docs/signing.md lists them; the signing input is
    hashed in its parts, never copied into one string; the ECDSA signature is JWA's R || S.
    Verification stays joserfc's (``verify``), and the tests check every signature with
    joserfc, jwcrypto and Node's jose.

    Its CPU is mostly OpenSSL's: SHA-256 of the document and one P-256 signature. That
    signature is two to four times dearer right after other work has emptied the CPU's caches
    of OpenSSL's tables than in a loop, so the ingest writer signs a batch's receipts one after
    the other (``kuitti.posting.service.sign_postings``)."""
    header = b'%b%d,"iss":%b,"receipt_id":"%b","partner_id":"%b"}' % (
        key.header_start,
        int(now.timestamp()),
        orjson.dumps(issuer),
        str(receipt_id).encode(),
        str(partner_id).encode(),
    )
    protected = base64.urlsafe_b64encode(header).rstrip(b"=")
    digest = hashlib.sha256(protected)
    digest.update(b".")
    digest.update(document)
    r, s = decode_dss_signature(key.ecdsa.sign(digest.digest(), _PREHASHED))
    raw = r.to_bytes(32, "big") + s.to_bytes(32, "big")  # JWA §3.4: R || S, 32 bytes each
    return f"{protected.decode()}..{base64.urlsafe_b64encode(raw).rstrip(b'=').decode()}"


def sign_existing(
    db: Database, settings: Settings, *, now: datetime, batch: int = 500, limit: int | None = None
) -> int:
    """Sign stored receipts that have no signature yet and enter them in the receipt log
    (``kuitti.receipt_log``; receipts signed before the log began are only entered), ``batch``
    per transaction: stopped at any point, it goes on where it stopped. Returns how many it
    signed or entered."""
    box = SecretBox(settings.resolved_secret_key)
    signed = 0
    after = uuid.UUID(int=0)
    while limit is None or signed < limit:
        size = batch if limit is None else min(batch, limit - signed)
        with db.session() as session:
            key = current_key(session, box, now=now)
            receipts = session.scalars(
                select(Receipt)
                .where(
                    or_(Receipt.signature.is_(None), Receipt.log_batch_id.is_(None)),
                    Receipt.id > after,
                )
                .order_by(Receipt.id)
                .limit(size)
            ).all()
            for receipt in receipts:
                if receipt.signature is None:
                    receipt.signature = sign(
                        key,
                        receipt.document.encode("utf-8", errors="replace"),
                        receipt_id=receipt.id,
                        partner_id=receipt.partner_id,
                        issuer=settings.issuer,
                        now=now,
                    )
            receipt_log.enter(session, receipts, now=now)
        after = receipts[-1].id if receipts else after
        signed += len(receipts)
        if len(receipts) < size:
            break
    return signed


def jwks(session: Session, *, now: datetime) -> dict[str, Any]:
    """The published keys: every key that signs or was retired less than ``RETENTION`` ago,
    each marked with its status (``signing`` or ``retired``) and dates."""
    rows = session.scalars(
        select(ReceiptSigningKey).order_by(
            ReceiptSigningKey.created_at.desc(), ReceiptSigningKey.kid
        )
    )
    return {"keys": [_published(row) for row in rows if _still_published(row, now)]}


def _still_published(row: ReceiptSigningKey, now: datetime) -> bool:
    return row.published_until is None or row.published_until > now


def _published(row: ReceiptSigningKey) -> dict[str, Any]:
    jwk = dict(row.public_jwk)
    jwk["status"] = "signing" if row.retired_at is None else "retired"
    jwk["created_at"] = iso_utc(row.created_at)
    if row.retired_at is not None and row.published_until is not None:
        jwk["retired_at"] = iso_utc(row.retired_at)
        jwk["published_until"] = iso_utc(row.published_until)
    return jwk


def fingerprint(document: bytes) -> str:
    """The short hash of a document that a receipt's QR code carries beside its id."""
    digest = hashlib.sha256(document).digest()
    return base64.urlsafe_b64encode(digest).decode()[:FINGERPRINT_CHARS]


def signed_header(signature: str) -> dict[str, Any]:
    """The protected header of a detached JWS made by ``sign``."""
    header: dict[str, Any] = orjson.loads(urlsafe_b64decode(signature.partition(".")[0].encode()))
    return header


def verification_url(document: bytes, signature: str) -> str:
    """The short URL of the public page that checks this receipt (its QR code)."""
    header = signed_header(signature)
    return f"{header['iss']}{VERIFY_PATH}?r={header['receipt_id']}&h={fingerprint(document)}"


# --- verification ------------------------------------------------------------------------------

VALID = "valid"
TAMPERED = "tampered"
UNKNOWN_KEY = "unknown_key"
MALFORMED = "malformed"


@dataclass(frozen=True)
class Verdict:
    """What a verification found: ``status`` is one of ``VALID``, ``TAMPERED`` (the document or
    the header is not what was signed), ``UNKNOWN_KEY`` (no published key has its ``kid``) and
    ``MALFORMED`` (not a receipt signature at all); the header's claims when it could be read."""

    status: str
    reason: str = ""
    header: dict[str, Any] | None = None
    key_status: str | None = None

    @property
    def valid(self) -> bool:
        return self.status == VALID

    def as_json(self) -> dict[str, Any]:
        header = self.header or {}
        return {
            "status": self.status,
            "valid": self.valid,
            "reason": self.reason,
            "kid": header.get("kid"),
            "issuer": header.get("iss"),
            "receipt_id": header.get("receipt_id"),
            "partner_id": header.get("partner_id"),
            "signed_at": header.get("iat"),
            "key_status": self.key_status,
        }


def verify(document: bytes, signature: str, keys: dict[str, Any]) -> Verdict:
    """Whether ``signature`` (a detached JWS) signs exactly ``document`` with one of ``keys``
    (a JWKS); the document is taken as it is, never parsed or serialised again."""
    protected, dot, rest = signature.partition(".")
    try:
        header = orjson.loads(urlsafe_b64decode(protected.encode()))
    except (ValueError, orjson.JSONDecodeError):
        return Verdict(MALFORMED, "the signature's header is not Base64url JSON")
    if not (dot and rest.startswith(".")) or not isinstance(header, dict):
        return Verdict(MALFORMED, "not a detached JWS (header..signature)")
    if (
        header.get("alg") not in ALLOWED
        or header.get("typ") != TYP
        or header.get("b64") is not False
    ):
        return Verdict(MALFORMED, f"not a {TYP} signature with alg {ALGORITHM}", header)
    jwk = next((k for k in keys.get("keys", []) if k.get("kid") == header.get("kid")), None)
    if jwk is None:
        return Verdict(UNKNOWN_KEY, "no published key has this kid", header)
    key_status = str(jwk.get("status", "signing"))
    try:
        public = ECKey.import_key({k: jwk[k] for k in ("kty", "crv", "x", "y")})
        jws.deserialize_compact(signature, public, payload=document, registry=REGISTRY)
    except (JoseError, ValueError, KeyError) as exc:
        return Verdict(TAMPERED, f"the signature does not match ({exc})", header, key_status)
    return Verdict(VALID, "", header, key_status)


def signed_document(document: bytes, signature: str, log: dict[str, Any] | None = None) -> bytes:
    """A receipt and its signature as one document a person can save: the flattened JWS JSON
    serialization (RFC 7515 §7.2.2) with the unencoded payload (RFC 7797 §5) holding the
    document's text, which any JOSE library verifies as it is; ``keys`` names where the
    signer's keys are published (a verifier decides for itself which keys it trusts), ``log``
    the receipt's proof of inclusion in the receipt log (``kuitti.receipts.log``)."""
    protected, _, sig = signature.partition("..")
    issuer = signed_header(signature)["iss"]
    text = document.decode("utf-8", errors="replace")
    saved = {"protected": protected, "payload": text, "signature": sig, "keys": issuer + JWKS_PATH}
    if log is not None:
        saved["log"] = log
    return orjson.dumps(saved, option=orjson.OPT_INDENT_2)


def verify_saved(saved: bytes, keys: dict[str, Any]) -> tuple[Verdict, bytes | None]:
    """``verify`` for a saved receipt (``signed_document``): the verdict and the document."""
    try:
        data = orjson.loads(saved)
        document = data["payload"].encode("utf-8")
        signature = f"{data['protected']}..{data['signature']}"
    except (orjson.JSONDecodeError, TypeError, KeyError, AttributeError):
        return Verdict(MALFORMED, "not a saved signed receipt (JWS JSON)"), None
    return verify(document, signature, keys), document
