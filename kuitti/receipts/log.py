"""The receipt log's signed tree heads and the inclusion proof of a receipt (docs/signing.md,
"The receipt log"; the batches the writer adds: ``kuitti.receipt_log``).

``seal`` claims every batch no head holds yet, builds the Merkle tree over their roots (RFC
9162: a batch root is a leaf of the head's tree) and stores a signed tree head: its sequence
number, time, tree size, root, and the hash of the head before it, so that the heads form a
chain and an old head cannot be rewritten without rewriting every later one. It is signed as a
compact JWS (``typ`` ``receipt-log-head+jws``) with the receipt-signing key, and published at
``/.well-known/receipt-log/heads/<seq>`` for anyone to keep a copy of (a witness).

A receipt's proof (``inclusion``) is its leaf's audit path in its batch's tree, its batch's
audit path in the head's tree and the signed head: from its saved signature alone, a verifier
recomputes both roots and checks the head's signature (``verify_inclusion``). With a copy of
the head kept elsewhere, that proves the receipt existed unchanged at the head's time, even
after the key that signed it leaked.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from joserfc import jws
from joserfc.errors import JoseError
from joserfc.jwk import ECKey
from joserfc.jws import JWSRegistry
from joserfc.registry import HeaderParameter
from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from kuitti import locks, merkle, receipt_log, signatures
from kuitti.clock import iso_utc
from kuitti.config import Settings
from kuitti.db import Database, database_of
from kuitti.models import Receipt, ReceiptLogBatch, ReceiptLogHead
from kuitti.security import SecretBox

TYP = "receipt-log-head+jws"
HEADS_PATH = "/.well-known/receipt-log/heads"
LATEST = "latest"

REGISTRY = JWSRegistry(
    header_registry={
        "iss": HeaderParameter("Issuer: the service's public URL", "str", required=True),
    },
    algorithms=signatures.ALLOWED,
)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    if not isinstance(text, str):
        raise ValueError("not Base64url text")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def head_hash(token: str) -> bytes:
    """What the next head names as its ``previous``: the SHA-256 of a head's JWS as published."""
    return hashlib.sha256(token.encode("ascii")).digest()


# --- sealing -----------------------------------------------------------------------------------


def seal(session: Session, box: SecretBox, *, issuer: str, now: datetime) -> ReceiptLogHead | None:
    """Store the signed tree head over every batch no head holds yet, in ``session``'s
    transaction (None when there is none). One sealer at a time: on PostgreSQL a lock, on
    SQLite the write transaction. A batch that commits while this runs goes into the next
    head: none is left out, none is in two heads."""
    locks.acquire(session, "receipt-log-seal")
    claimed = session.execute(
        select(ReceiptLogBatch.id, ReceiptLogBatch.root, ReceiptLogBatch.size)
        .where(ReceiptLogBatch.head_seq.is_(None))
        .order_by(ReceiptLogBatch.id)
    ).all()
    if not claimed:
        return None
    last = session.scalar(select(ReceiptLogHead).order_by(ReceiptLogHead.seq.desc()).limit(1))
    tree = merkle.levels([merkle.leaf_hash(row.root) for row in claimed])
    seq = 1 if last is None else last.seq + 1
    previous = None if last is None else head_hash(last.jws)
    payload = {
        "seq": seq,
        "time": iso_utc(now),
        "tree_size": len(claimed),
        "receipts": sum(row.size for row in claimed),
        "root": _b64(tree[-1][0]),
        "previous": None if previous is None else _b64(previous),
    }
    key = signatures.current_key(session, box, now=now)
    token = sign_head(key, payload, issuer=issuer)
    head = ReceiptLogHead(
        seq=seq,
        created_at=now,
        tree_size=payload["tree_size"],
        receipts=payload["receipts"],
        root=tree[-1][0],
        previous=previous,
        kid=key.kid,
        jws=token,
    )
    session.add(head)
    session.flush()
    database_of(session).update_rows(
        session,
        ReceiptLogBatch,
        [
            {
                "id": row.id,
                "head_seq": seq,
                "head_index": index,
                "head_path": b"".join(merkle.path(tree, index)),
            }
            for index, row in enumerate(claimed)
        ],
        match=("id",),
    )
    return head


def sign_head(key: signatures.LoadedKey, claims: dict[str, Any], *, issuer: str) -> str:
    """A tree head's compact JWS: its ``claims`` signed with the receipt-signing ``key``."""
    return jws.serialize_compact(
        {"alg": signatures.ALGORITHM, "typ": TYP, "kid": key.kid, "iss": issuer},
        orjson.dumps(claims),
        key.private,
        algorithms=signatures.ALLOWED,
        registry=REGISTRY,
    )


def seal_now(db: Database, settings: Settings, *, now: datetime) -> dict[str, Any] | None:
    """``seal`` in a transaction of its own: the head published (None: nothing to seal)."""
    with db.session() as session:
        head = seal(
            session, SecretBox(settings.resolved_secret_key), issuer=settings.issuer, now=now
        )
    return None if head is None else published(head)


# --- publication -------------------------------------------------------------------------------


def published(head: ReceiptLogHead) -> dict[str, Any]:
    """A head as it is published: its signed claims, and the JWS a witness keeps."""
    claims: dict[str, Any] = orjson.loads(_unb64(head.jws.split(".")[1]))
    return {**claims, "kid": head.kid, "jws": head.jws}


def published_head(session: Session, seq: int | None) -> dict[str, Any] | None:
    """The head ``seq``, or the latest with None; None when there is no such head."""
    query = select(ReceiptLogHead)
    if seq is None:
        query = query.order_by(ReceiptLogHead.seq.desc()).limit(1)
    else:
        query = query.where(ReceiptLogHead.seq == seq)
    head = session.scalar(query)
    return None if head is None else published(head)


# --- a receipt's proof -------------------------------------------------------------------------

PENDING = "pending"


@dataclass(frozen=True)
class Inclusion:
    """Where a stored receipt is in the log: ``member`` is ``signed_json``'s ``log`` member,
    ``seq`` the head that holds its batch (None: pending, no head holds it yet)."""

    seq: int | None
    member: dict[str, Any]

    @property
    def state(self) -> str:
        """What a saved receipt's rendering depends on, of the log (part of its ETag)."""
        return log_state(True, self.seq)


def log_state(logged: bool, seq: int | None) -> str:
    if not logged:
        return ""
    return PENDING if seq is None else f"head {seq}"


LOG_STATE = (
    select(ReceiptLogBatch.head_seq)
    .join(Receipt, Receipt.log_batch_id == ReceiptLogBatch.id)
    .where(Receipt.id == bindparam("receipt_id"))
)
"""A receipt's batch's head (no row: not in the log), read before a saved receipt renders."""


_PROOF = (
    select(
        ReceiptLogBatch.leaves,
        ReceiptLogBatch.head_index,
        ReceiptLogBatch.head_path,
        ReceiptLogHead.seq,
        ReceiptLogHead.tree_size,
        ReceiptLogHead.jws,
    )
    .outerjoin(ReceiptLogHead, ReceiptLogHead.seq == ReceiptLogBatch.head_seq)
    .where(ReceiptLogBatch.id == bindparam("batch_id"))
)


def inclusion(session: Session, receipt: Receipt) -> Inclusion | None:
    """The proof that ``receipt`` is in the log (None: it is not, not signed yet). Its heads
    are published by the issuer of its signature. One prebuilt statement on the driver (through
    the ORM, the batch and the head cost a saved receipt about half a millisecond more)."""
    if receipt.log_batch_id is None or receipt.signature is None:
        return None
    rows = database_of(session).session_rows(session, _PROOF, {"batch_id": receipt.log_batch_id})
    if not rows:
        return None
    leaves, head_index, head_path, seq, head_size, token = rows[0]
    heads = signatures.signed_header(receipt.signature)["iss"] + HEADS_PATH
    if seq is None:
        return Inclusion(None, {PENDING: True, "heads": heads})
    index = receipt_log.position(leaves, receipt.signature)
    if index is None:
        return None
    at_head = (head_index, head_size, merkle.split(head_path))
    return Inclusion(seq, proof(merkle.split(leaves), index, at_head, token, heads=heads))


def proof(
    leaves: list[bytes],
    index: int,
    at_head: tuple[int, int, list[bytes]],
    tree_head: str,
    *,
    heads: str,
) -> dict[str, Any]:
    """``signed_json``'s ``log`` member for leaf ``index`` of a batch of ``leaves`` whose
    batch is (index, tree size, audit path) ``at_head`` in the tree of ``tree_head``."""
    head_index, head_size, head_path = at_head
    return {
        "batch_index": index,
        "batch_size": len(leaves),
        "batch_path": [_b64(h) for h in merkle.path(merkle.levels(leaves), index)],
        "head_index": head_index,
        "head_size": head_size,
        "head_path": [_b64(h) for h in head_path],
        "tree_head": tree_head,
        "heads": heads,
    }


# --- verifying -----------------------------------------------------------------------------------

IN_LOG = "in_log"
NOT_LOGGED = "not_logged"
TAMPERED = "tampered"
UNKNOWN_KEY = signatures.UNKNOWN_KEY


@dataclass(frozen=True)
class LogVerdict:
    """What the check of a saved receipt's proof found: ``IN_LOG`` (the proof leads to a head
    signed by a published key: ``head`` holds its claims), ``PENDING`` (saved before a head
    held it), ``NOT_LOGGED`` (no proof), ``TAMPERED`` or ``UNKNOWN_KEY`` (the head's)."""

    status: str
    reason: str = ""
    head: dict[str, Any] | None = None

    @property
    def refuted(self) -> bool:
        """Whether the saved receipt's proof is false: the receipt must not be taken."""
        return self.status in (TAMPERED, UNKNOWN_KEY)

    def as_json(self) -> dict[str, Any]:
        head = self.head or {}
        return {
            "status": self.status,
            "reason": self.reason,
            "since": head.get("time"),
            "head": head.get("seq"),
        }


def verify_head(token: str, keys: Mapping[str, Any]) -> LogVerdict:
    """Whether ``token`` is a tree head signed by one of ``keys`` (a JWKS)."""
    try:
        header = jws.extract_compact(token.encode("ascii")).headers()
    except (JoseError, ValueError, UnicodeError):
        return LogVerdict(TAMPERED, "the tree head is not a compact JWS")
    if header.get("typ") != TYP or header.get("alg") not in signatures.ALLOWED:
        return LogVerdict(TAMPERED, f"the tree head is not a {TYP} with alg ES256")
    jwk = next((k for k in keys.get("keys", []) if k.get("kid") == header.get("kid")), None)
    if jwk is None:
        return LogVerdict(UNKNOWN_KEY, "no published key has the tree head's kid")
    try:
        public = ECKey.import_key({k: jwk[k] for k in ("kty", "crv", "x", "y")})
        signed = jws.deserialize_compact(
            token, public, algorithms=signatures.ALLOWED, registry=REGISTRY
        )
        claims = orjson.loads(signed.payload)
    except (JoseError, ValueError, KeyError, orjson.JSONDecodeError) as exc:
        return LogVerdict(TAMPERED, f"the tree head's signature does not match ({exc})")
    if not isinstance(claims, dict):
        return LogVerdict(TAMPERED, "the tree head's claims are not an object")
    return LogVerdict(IN_LOG, head=claims)


def verify_inclusion(saved: Mapping[str, Any], keys: Mapping[str, Any]) -> LogVerdict:
    """The check of a saved receipt's ``log`` member (``signed_document``): its signature's
    leaf, through both audit paths, to the root of a tree head signed by one of ``keys``. The
    signature itself is ``signatures.verify``'s to check."""
    member = saved.get("log")
    if member is None:
        return LogVerdict(NOT_LOGGED, "the saved receipt carries no proof")
    if not isinstance(member, dict):
        return LogVerdict(TAMPERED, "the proof is not an object")
    if member.get(PENDING) is True:
        return LogVerdict(PENDING, "saved before a tree head held it: fetch it again")
    try:
        leaf = receipt_log.leaf(f"{saved['protected']}..{saved['signature']}")
        batch_root = merkle.root_from_path(
            member["batch_index"],
            member["batch_size"],
            leaf,
            [_unb64(h) for h in member["batch_path"]],
        )
        head_root = None
        if batch_root is not None:
            head_root = merkle.root_from_path(
                member["head_index"],
                member["head_size"],
                merkle.leaf_hash(batch_root),
                [_unb64(h) for h in member["head_path"]],
            )
        token = member["tree_head"]
        if not isinstance(token, str):
            raise TypeError("the tree head is not text")
    except (KeyError, TypeError, ValueError, binascii.Error, UnicodeError):
        return LogVerdict(TAMPERED, "the proof is not one kuitti writes")
    head = verify_head(token, keys)
    if head.status != IN_LOG or head.head is None:
        return head
    claims = head.head
    if (
        head_root is None
        or claims.get("root") != _b64(head_root)
        or claims.get("tree_size") != member["head_size"]
    ):
        return LogVerdict(TAMPERED, "the proof does not lead to the tree head's root", claims)
    return head


def check_saved(saved: bytes, keys: dict[str, Any]) -> dict[str, Any]:
    """The whole check of a saved receipt (``signed_document``), as JSON: its signature's
    verdict (``signatures.verify_saved``) and, when the signature is genuine, its proof's
    (``log``). A false proof makes the receipt ``tampered``: it claims what is not so."""
    verdict, _ = signatures.verify_saved(saved, keys)
    result = verdict.as_json()
    if verdict.valid:
        logged = verify_inclusion(orjson.loads(saved), keys)
        result["log"] = logged.as_json()
        if logged.refuted:
            result.update(status=TAMPERED, valid=False, reason=logged.reason)
    return result


def described(result: Mapping[str, Any]) -> str:
    """What ``check_saved`` found of the log, in a few words (the command line's)."""
    logged = result.get("log") or {}
    if logged.get("status") == IN_LOG:
        return f"in the log since {logged['since']} (tree head {logged['head']})"
    if logged.get("status") == PENDING:
        return "not in a signed tree head yet"
    return "no proof of the log"
