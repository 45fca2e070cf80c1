"""Receipt signing's CPU: per receipt, to sign and to verify, for ES256 and Ed25519 (EdDSA) with
joserfc, and for kuitti's own ``kuitti.signatures.sign``/``verify`` (ES256, the detached JWS
with the unencoded payload), on the realistic receipts ``bench/ingest.py`` posts, stored as the
writer stores them. Goals: signing at most 0.1 ms of CPU per receipt, verifying at most 1 ms.

CPU is this process's user+system time (``time.process_time``) over every receipt, several
passes, the best pass kept (other tenants of the machine only ever add to it).

    .venv/bin/python bench/signing.py              # 60-row receipts
    .venv/bin/python bench/signing.py --rows 4
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import uuid
import warnings
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import orjson
from joserfc import jws
from joserfc.jwk import ECKey, OKPKey

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kuitti import signatures

PASSES = 5


def per_receipt_us(work: Callable[[bytes], object], documents: list[bytes]) -> float:
    """The best pass's CPU per document, in microseconds."""
    best = float("inf")
    for _ in range(PASSES):
        start = time.process_time()
        for document in documents:
            work(document)
        best = min(best, time.process_time() - start)
    return best / len(documents) * 1e6


def kuitti_figures(documents: list[bytes]) -> tuple[float, float]:
    """kuitti's own signing and verifying CPU per receipt (µs)."""
    key = ECKey.generate_key(signatures.CURVE, auto_kid=True)
    assert key.kid is not None
    loaded = signatures.LoadedKey(key.kid, key)
    keys = {"keys": [key.as_dict(private=False)]}
    now = datetime.now(UTC)

    def sign(document: bytes) -> str:
        return signatures.sign(
            loaded, document, receipt_id=uuid.uuid4(), partner_id=uuid.uuid4(),
            issuer="https://kuitti.example", now=now,
        )  # fmt: skip

    signed = {document: sign(document) for document in documents}
    assert all(signatures.verify(d, s, keys).valid for d, s in signed.items())
    return (
        per_receipt_us(sign, documents),
        per_receipt_us(lambda d: signatures.verify(d, signed[d], keys), documents),
    )


def algorithm_figures(documents: list[bytes], algorithm: str) -> tuple[float, float]:
    """joserfc's plain compact JWS with ``algorithm``: signing and verifying CPU (µs)."""
    key: ECKey | OKPKey = (
        ECKey.generate_key("P-256") if algorithm == "ES256" else OKPKey.generate_key("Ed25519")
    )
    header = {"alg": algorithm}
    signed = {d: jws.serialize_compact(header, d, key, algorithms=[algorithm]) for d in documents}
    return (
        per_receipt_us(
            lambda d: jws.serialize_compact(header, d, key, algorithms=[algorithm]), documents
        ),
        per_receipt_us(
            lambda d: jws.deserialize_compact(signed[d], key, algorithms=[algorithm]), documents
        ),
    )


def stored_documents(bodies: list[bytes]) -> list[bytes]:
    """Posted bodies as the writer stores them."""
    return [orjson.dumps(orjson.loads(body)) for body in bodies]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=60, help="product rows (0: 1–60 at random)")
    parser.add_argument("--receipts", type=int, default=200)
    args = parser.parse_args()
    # Here, not at the top: bench/ingest.py imports this module for its own first line.
    from ingest import realistic_receipt

    rng = random.Random(20260115)
    documents = [orjson.dumps(realistic_receipt(rng, i, args.rows)) for i in range(args.receipts)]
    size = sorted(len(d) for d in documents)[len(documents) // 2]
    print(f"{len(documents)} receipts of {args.rows or '1-60'} rows, median {size / 1024:.1f} KB")
    warnings.simplefilter("ignore")  # joserfc warns that EdDSA is deprecated (RFC 9864)
    for algorithm in ("ES256", "EdDSA"):
        sign, verify = algorithm_figures(documents, algorithm)
        print(f"joserfc {algorithm:5}  sign {sign:6.1f} µs  verify {verify:6.1f} µs CPU/receipt")
    sign, verify = kuitti_figures(documents)
    print(
        f"kuitti ES256 detached  sign {sign:6.1f} µs (goal ≤ 100)  "
        f"verify {verify:6.1f} µs (goal ≤ 1000) CPU/receipt"
    )


if __name__ == "__main__":
    main()
