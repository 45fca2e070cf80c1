"""The receipt log's batches: how stored receipts enter the append-only log (docs/signing.md,
"The receipt log"; the signed tree heads over the batches: ``kuitti.receipts.log``).

Every transaction that stores receipts adds one batch row to ``receipt_log_batches``: the leaf
hash of each receipt's signature (RFC 9162: SHA-256 of 0x00 and the detached JWS as stored,
which binds the document's bytes, the receipt id and the partner) one after another in leaf
order, and the Merkle root over them; each receipt names its batch (``log_batch_id``). The
batch commits with its receipts or not at all, and costs one row per transaction, never a
row or a lock per receipt or per merchant.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from kuitti import merkle
from kuitti.ids import new_id
from kuitti.models import Receipt, ReceiptLogBatch


def leaf(signature: str) -> bytes:
    """A receipt's leaf hash: of its detached JWS (``header..signature``) as stored."""
    return merkle.leaf_hash(signature.encode("ascii"))


def batch_row(signatures: Sequence[str], *, now: datetime) -> dict[str, Any]:
    """The row of a new batch of receipts with ``signatures``, in this order."""
    leaves = [leaf(signature) for signature in signatures]
    return {
        "id": new_id(),
        "created_at": now,
        "size": len(leaves),
        "root": merkle.root(leaves),
        "leaves": b"".join(leaves),
        "head_seq": None,
        "head_index": None,
        "head_path": None,
    }


def enter_rows(receipts: Sequence[dict[str, Any]], *, now: datetime) -> dict[str, Any]:
    """Enter receipt rows about to be inserted (as ``posting.service.receipt_rows`` builds
    them) in a new batch: each row's ``log_batch_id`` is set; the batch's row, to insert in the
    same transaction, is returned."""
    batch = batch_row([row["signature"] for row in receipts], now=now)
    for row in receipts:
        row["log_batch_id"] = batch["id"]
    return batch


def enter(session: Session, receipts: Sequence[Receipt], *, now: datetime) -> None:
    """Enter signed receipts of ``session`` (stored or about to be) in a new batch, inserted in
    its transaction."""
    signed = [receipt for receipt in receipts if receipt.signature is not None]
    if not signed:
        return
    batch = batch_row([receipt.signature for receipt in signed if receipt.signature], now=now)
    for receipt in signed:
        receipt.log_batch_id = batch["id"]
    session.add(ReceiptLogBatch(**batch))


def position(batch_leaves: bytes, signature: str) -> int | None:
    """Where the receipt with ``signature`` is among a batch's leaves (None: not there)."""
    wanted = leaf(signature)
    hashes: Sequence[bytes] = merkle.split(batch_leaves)
    try:
        return hashes.index(wanted)
    except ValueError:
        return None
