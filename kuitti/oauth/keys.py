"""Token signing keys, kept in the database so every instance signs and verifies alike.

ES256 (P-256). The newest key signs; every stored key verifies and is published in the JWKS, so
``kuitti keys rotate`` never invalidates a token already issued. Private keys are sealed with the
server secret (``KUITTI_SECRET_KEY``), which is why every instance must share that secret.
"""

from __future__ import annotations

import threading
from datetime import datetime
from typing import Any

from joserfc.jwk import ECKey
from sqlalchemy import select
from sqlalchemy.orm import Session

from kuitti import locks
from kuitti.models import SigningKey
from kuitti.security import ES256, SecretBox, new_es256_key, open_key

ALGORITHM = ES256

# Public keys never change for a kid, so a process may keep them.
_public_cache: dict[str, ECKey] = {}
_cache_lock = threading.Lock()


def create_key(session: Session, box: SecretBox, *, now: datetime) -> SigningKey:
    row = SigningKey(**new_es256_key(box).columns(), created_at=now)
    session.add(row)
    session.flush()
    return row


def current_key(session: Session, box: SecretBox, *, now: datetime) -> tuple[str, ECKey]:
    """The newest key (created on first use), as (kid, private key)."""
    row = _newest(session)
    if row is None:
        locks.acquire(session, "oauth-signing-key")
        row = _newest(session) or create_key(session, box, now=now)
    return row.kid, open_key(box, row.private_jwk_sealed)


def _newest(session: Session) -> SigningKey | None:
    return session.scalar(
        select(SigningKey).order_by(SigningKey.created_at.desc(), SigningKey.kid).limit(1)
    )


def public_key(session: Session, kid: str) -> ECKey | None:
    with _cache_lock:
        cached = _public_cache.get(kid)
    if cached is not None:
        return cached
    row = session.get(SigningKey, kid)
    if row is None or row.algorithm != ALGORITHM:
        return None
    key = ECKey.import_key(row.public_jwk)
    with _cache_lock:
        _public_cache[kid] = key
    return key


def jwks(session: Session) -> dict[str, Any]:
    rows = session.scalars(select(SigningKey).order_by(SigningKey.created_at.desc()))
    return {"keys": [dict(row.public_jwk) for row in rows]}
