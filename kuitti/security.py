"""Generating, hashing and sealing secrets.

API keys, client secrets and other bearer secrets are 256-bit random strings: a SHA-256 digest is
enough to store them (no slow hash needed for secrets nobody can guess), and looking a key up by
its digest through a unique index is both fast and free of timing leaks about the key itself.

Webhook keys are the exception: HMAC signing needs the key itself, so they are sealed (Fernet,
keyed from the server secret) rather than hashed.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from cryptography.fernet import Fernet, InvalidToken

if TYPE_CHECKING:
    from joserfc.jwk import ECKey

API_KEY_PREFIX = "kt_"
SANDBOX_API_KEY_PREFIX = "kt_test_"  # a sandbox partner's key (docs/sandbox.md): visibly a test
CLIENT_SECRET_PREFIX = "kcs_"  # noqa: S105  (a prefix, not a secret)
CLIENT_ID_PREFIX = "kc_"
WEBHOOK_KEY_PREFIX = "whsec_"


def new_api_key(*, sandbox: bool = False) -> str:
    return (SANDBOX_API_KEY_PREFIX if sandbox else API_KEY_PREFIX) + secrets.token_urlsafe(32)


def new_client_id() -> str:
    return CLIENT_ID_PREFIX + secrets.token_urlsafe(12)


def new_client_secret() -> str:
    return CLIENT_SECRET_PREFIX + secrets.token_urlsafe(32)


def new_webhook_key() -> str:
    """The Standard Webhooks secret format: ``whsec_`` + Base64 of 32 random bytes."""
    return WEBHOOK_KEY_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def secret_matches(secret: str, digest: str) -> bool:
    return hmac.compare_digest(hash_secret(secret), digest)


class SecretBox:
    """Seals secrets that must be read back (webhook keys) with a key derived from the server
    secret."""

    def __init__(self, server_secret: str) -> None:
        derived = hashlib.sha256(b"kuitti-secret-box:" + server_secret.encode()).digest()
        self._fernet = Fernet(base64.urlsafe_b64encode(derived))

    def seal(self, plaintext: str) -> str:
        return self._fernet.encrypt(plaintext.encode()).decode()

    def open(self, sealed: str) -> str:
        try:
            return self._fernet.decrypt(sealed.encode()).decode()
        except InvalidToken as exc:
            raise ValueError("sealed secret does not open with this server secret") from exc


ES256 = "ES256"


@dataclass(frozen=True)
class SealedKey:
    """A new ES256 (P-256) key pair as it is stored: its kid (the RFC 7638 thumbprint), its
    public JWK, and its private JWK sealed with the server secret."""

    kid: str
    public_jwk: dict[str, Any]
    private_jwk_sealed: str

    def columns(self) -> dict[str, Any]:
        """The columns of a key table's row (``kid``, ``algorithm``, the two JWKs)."""
        return {
            "kid": self.kid,
            "algorithm": ES256,
            "public_jwk": self.public_jwk,
            "private_jwk_sealed": self.private_jwk_sealed,
        }


def new_es256_key(box: SecretBox) -> SealedKey:
    from joserfc.jwk import ECKey  # loaded by what signs, not by every command

    key = ECKey.generate_key("P-256", auto_kid=True)
    assert key.kid is not None
    return SealedKey(
        kid=key.kid,
        public_jwk={**key.as_dict(private=False), "alg": ES256, "use": "sig"},
        private_jwk_sealed=box.seal(orjson.dumps(key.as_dict(private=True)).decode()),
    )


def open_key(box: SecretBox, sealed: str) -> ECKey:
    """The private key of ``SealedKey.private_jwk_sealed``."""
    from joserfc.jwk import ECKey

    return ECKey.import_key(orjson.loads(box.open(sealed)))


def sign(server_secret: str, purpose: str, message: bytes) -> bytes:
    """A MAC for capability tokens (receipt links); purpose separates the uses of the key."""
    key = hashlib.sha256(f"kuitti:{purpose}:".encode() + server_secret.encode()).digest()
    return hmac.new(key, message, hashlib.sha256).digest()
