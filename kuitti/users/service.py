"""Service user accounts. Passwords are hashed with argon2id.

Why one long module: accounts, their e-mail tokens (verification, reset), login throttling,
export and deletion are one table family with rules that refer to each other (deletion ends
sessions and tokens; a reset verifies the address).
"""

from __future__ import annotations

import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

import orjson
from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from email_validator import EmailNotValidError, validate_email
from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from kuitti import locks, security
from kuitti.clock import as_utc, iso_utc
from kuitti.config import Settings
from kuitti.delivery.mail import enqueue_mail
from kuitti.ids import new_id
from kuitti.models import (
    Card,
    CardMatch,
    Connection,
    LoginThrottle,
    Partner,
    Receipt,
    ReceiptDelivery,
    User,
    UserSession,
    UserToken,
)
from kuitti.webhooks.events import notify_connection
from kuitti.webhooks.payloads import OAuthRevokeNotification

MIN_PASSWORD_LENGTH = 8
MAX_PASSWORD_LENGTH = 1024
_hasher = PasswordHasher()


class UserInputError(ValueError):
    """An e-mail address or password that an account cannot be made with."""


def normalize_email(email: str) -> str:
    try:
        return validate_email(email.strip(), check_deliverability=False).normalized.lower()
    except EmailNotValidError as exc:
        raise UserInputError(f"not a valid e-mail address: {exc}") from None


def hash_password(password: str) -> str:
    if not MIN_PASSWORD_LENGTH <= len(password) <= MAX_PASSWORD_LENGTH:
        raise UserInputError(
            f"a password has {MIN_PASSWORD_LENGTH} to {MAX_PASSWORD_LENGTH} characters"
        )
    return _hasher.hash(password)


def password_matches(password_hash: str, password: str) -> bool:
    try:
        return _hasher.verify(password_hash, password)
    except (VerificationError, InvalidHashError):
        return False


def user_by_email(session: Session, email: str) -> User | None:
    try:
        normalized = normalize_email(email)
    except UserInputError:
        return None
    return session.scalar(select(User).where(User.email == normalized))


def create_user(
    session: Session, email: str, password: str, *, now: datetime, verified: bool
) -> User:
    normalized = normalize_email(email)
    if session.scalar(select(User.id).where(User.email == normalized)) is not None:
        raise UserInputError(f"a user with the address {normalized} already exists")
    user = User(
        id=new_id(),
        email=normalized,
        password_hash=hash_password(password),
        email_verified_at=now if verified else None,
        created_at=now,
    )
    session.add(user)
    session.flush()
    return user


# --- sessions ---------------------------------------------------------------------------------

SESSION_TTL_SECONDS = 14 * 24 * 3600


def start_session(session: Session, user: User, *, now: datetime) -> str:
    """A new login session; returns the cookie value (only its digest is stored)."""
    token = secrets.token_urlsafe(32)
    session.add(
        UserSession(
            token_hash=security.hash_secret(token),
            user_id=user.id,
            created_at=now,
            expires_at=now + timedelta(seconds=SESSION_TTL_SECONDS),
        )
    )
    session.flush()
    return token


def user_for_session(session: Session, token: str | None, *, now: datetime) -> User | None:
    if not token or len(token) > 200:
        return None
    row = session.get(UserSession, security.hash_secret(token))
    if row is None or as_utc(row.expires_at) <= now:
        return None
    user = session.get(User, row.user_id)
    if user is None or user.deleted_at is not None:
        return None
    return user


def end_session(session: Session, token: str | None) -> None:
    if token:
        session.execute(
            delete(UserSession).where(UserSession.token_hash == security.hash_secret(token))
        )


def end_all_sessions(session: Session, user_id: uuid.UUID) -> None:
    session.execute(delete(UserSession).where(UserSession.user_id == user_id))


# --- login and its throttling -------------------------------------------------------------------

THROTTLE_WINDOW_SECONDS = 15 * 60
MAX_FAILURES_PER_ADDRESS = 5
MAX_FAILURES_PER_CLIENT = 30
# Verifying against this hash when no user has the address keeps the answer time the same.
_DUMMY_HASH = _hasher.hash("not a real password, only for timing")


class LoginThrottled(Exception):
    """Too many failed logins for the address or from the client; try again later."""


def _throttle_keys(email: str, client: str) -> list[tuple[str, int]]:
    address = email.strip().lower()
    return [
        (security.hash_secret(f"login:address:{address}"), MAX_FAILURES_PER_ADDRESS),
        (security.hash_secret(f"login:client:{client}"), MAX_FAILURES_PER_CLIENT),
    ]


def _throttle_row(session: Session, key_hash: str, now: datetime) -> LoginThrottle | None:
    row = session.get(LoginThrottle, key_hash)
    if (
        row is not None
        and as_utc(row.window_started_at) + timedelta(seconds=THROTTLE_WINDOW_SECONDS) <= now
    ):
        row.failures = 0
        row.window_started_at = now
    return row


def authenticate(
    session: Session, email: str, password: str, *, client: str, now: datetime
) -> User | None:
    """The user whose address and password these are, or None (a failure is counted). Raises
    ``LoginThrottled`` without checking the password when the address or the client has failed
    too often in the current window."""
    keys = _throttle_keys(email, client)
    for key, _limit in sorted(keys):
        # Concurrent failures for one key must not both insert its row (PostgreSQL).
        locks.acquire(session, "login-throttle", key)
    rows = [(_throttle_row(session, key, now), limit) for key, limit in keys]
    if any(row is not None and row.failures >= limit for row, limit in rows):
        raise LoginThrottled("Too many failed attempts; try again in 15 minutes.")
    user = user_by_email(session, email)
    if user is not None and user.deleted_at is None:
        if password_matches(user.password_hash, password):
            for key, _limit in keys[:1]:
                session.execute(delete(LoginThrottle).where(LoginThrottle.key_hash == key))
            return user
    else:
        password_matches(_DUMMY_HASH, password)
    for (row, _limit), (key, _l) in zip(rows, keys, strict=True):
        if row is None:
            session.add(LoginThrottle(key_hash=key, failures=1, window_started_at=now))
        else:
            row.failures += 1
    session.flush()
    return None


# --- e-mail tokens: verification and password reset ----------------------------------------------


class TokenPurpose(StrEnum):
    VERIFY_EMAIL = "verify_email"
    RESET_PASSWORD = "reset_password"  # noqa: S105  (a purpose, not a password)

    @property
    def ttl_seconds(self) -> int:
        match self:
            case TokenPurpose.VERIFY_EMAIL:
                return 7 * 24 * 3600
            case TokenPurpose.RESET_PASSWORD:
                return 3600


def issue_user_token(session: Session, user: User, purpose: TokenPurpose, *, now: datetime) -> str:
    token = secrets.token_urlsafe(32)
    session.add(
        UserToken(
            token_hash=security.hash_secret(token),
            user_id=user.id,
            purpose=purpose.value,
            created_at=now,
            expires_at=now + timedelta(seconds=purpose.ttl_seconds),
        )
    )
    session.flush()
    return token


def peek_user_token(
    session: Session, token: str, purpose: TokenPurpose, *, now: datetime
) -> UserToken | None:
    """The unused, unexpired token row (not yet consumed)."""
    if not token or len(token) > 200:
        return None
    row = session.get(UserToken, security.hash_secret(token))
    if (
        row is None
        or row.purpose != purpose.value
        or row.used_at is not None
        or as_utc(row.expires_at) <= now
    ):
        return None
    return row


def use_user_token(
    session: Session, token: str, purpose: TokenPurpose, *, now: datetime
) -> User | None:
    """Consume a single-use token; the user it was for, or None."""
    row = peek_user_token(session, token, purpose, now=now)
    if row is None:
        return None
    claimed = session.execute(
        update(UserToken)
        .where(UserToken.token_hash == row.token_hash, UserToken.used_at.is_(None))
        .values(used_at=now)
    )
    if int(getattr(claimed, "rowcount", 0) or 0) != 1:
        return None
    user = session.get(User, row.user_id)
    return user if user is not None and user.deleted_at is None else None


def send_verification_mail(
    session: Session, settings: Settings, user: User, *, now: datetime
) -> None:
    link = _token_link(session, settings, user, TokenPurpose.VERIFY_EMAIL, "verify-email", now)
    enqueue_mail(
        session,
        to=user.email,
        subject="Confirm your e-mail address for kuitti",
        text_body=(
            "Welcome to kuitti.\n\n"
            f"Open this link to confirm that {user.email} is your address:\n\n{link}\n\n"
            "Receipts sent to this address reach your account once it is confirmed. "
            "The link works for 7 days. If you did not sign up, ignore this message.\n"
        ),
        now=now,
    )


def _token_link(
    session: Session,
    settings: Settings,
    user: User,
    purpose: TokenPurpose,
    path: str,
    now: datetime,
) -> str:
    """A new one-time link of ``purpose`` for the user, on the account pages' host."""
    token = issue_user_token(session, user, purpose, now=now)
    return f"{settings.auth_base}/{path}/{token}"


def verify_email(session: Session, token: str, *, now: datetime) -> User | None:
    user = use_user_token(session, token, TokenPurpose.VERIFY_EMAIL, now=now)
    if user is not None and user.email_verified_at is None:
        user.email_verified_at = now
    return user


def request_password_reset(
    session: Session, settings: Settings, email: str, *, now: datetime
) -> None:
    """Mail a reset link if a user has the address; the caller answers the same either way."""
    user = user_by_email(session, email)
    if user is None or user.deleted_at is not None:
        return
    link = _token_link(session, settings, user, TokenPurpose.RESET_PASSWORD, "password-reset", now)
    enqueue_mail(
        session,
        to=user.email,
        subject="Reset your kuitti password",
        text_body=(
            "Someone asked to reset the password of your kuitti account.\n\n"
            f"Open this link within an hour to choose a new password:\n\n{link}\n\n"
            "If it was not you, ignore this message; your password stays as it is.\n"
        ),
        now=now,
    )


def reset_password(
    session: Session, token: str, new_password: str, *, now: datetime
) -> User | None:
    """Set a new password with a reset token: every session ends, and the address counts as
    verified (the link reached it)."""
    new_hash = hash_password(new_password)  # refuse a bad password before using the token
    user = use_user_token(session, token, TokenPurpose.RESET_PASSWORD, now=now)
    if user is None:
        return None
    user.password_hash = new_hash
    if user.email_verified_at is None:
        user.email_verified_at = now
    end_all_sessions(session, user.id)
    return user


# --- connections seen from the user's side --------------------------------------------------


def revoke_connection(session: Session, connection: Connection, *, now: datetime) -> None:
    """The user removes a connection: it ends at once (its tokens with it) and the partner gets
    ``oauth_authorization_revoke`` (written in this transaction, sent after commit)."""
    if not connection.active:
        return
    connection.revoked_at = now
    connection.updated_at = now
    notify_connection(session, connection, OAuthRevokeNotification.about(connection), now=now)


@dataclass(frozen=True)
class ConnectionView:
    connection: Connection
    partner_name: str


def user_connections(session: Session, user_id: uuid.UUID) -> list[ConnectionView]:
    rows = session.execute(
        select(Connection, Partner.name)
        .join(Partner, Partner.id == Connection.partner_id)
        .where(Connection.user_id == user_id, Connection.revoked_at.is_(None))
        .order_by(Connection.created_at)
    )
    return [ConnectionView(connection, name) for connection, name in rows]


def user_receipts(session: Session, user_id: uuid.UUID, *, limit: int = 200) -> list[Receipt]:
    """The receipts delivered to the user, newest first."""
    return list(
        session.scalars(
            select(Receipt)
            .join(ReceiptDelivery, ReceiptDelivery.receipt_id == Receipt.id)
            .where(ReceiptDelivery.user_id == user_id)
            .order_by(ReceiptDelivery.receipt_time.desc(), Receipt.id.desc())
            .limit(limit)
        )
    )


def export_data(session: Session, user: User) -> dict[str, Any]:
    """Everything kuitti keeps about the user, as one JSON object (GDPR access/portability).
    Each receipt's document is its stored bytes (an ``orjson.Fragment``, written into the
    export unchanged) beside its signature (docs/signing.md), or null before the backfill."""
    connections = session.execute(
        select(Connection, Partner.name)
        .join(Partner, Partner.id == Connection.partner_id)
        .where(Connection.user_id == user.id)
        .order_by(Connection.created_at)
    )
    deliveries = session.execute(
        select(ReceiptDelivery, Receipt)
        .join(Receipt, Receipt.id == ReceiptDelivery.receipt_id)
        .where(ReceiptDelivery.user_id == user.id)
        .order_by(ReceiptDelivery.receipt_time.desc(), Receipt.id.desc())
    )
    return {
        "user": {
            "user_id": str(user.id),
            "email": user.email,
            "email_verified_at": _iso(user.email_verified_at),
            "created_at": _iso(user.created_at),
        },
        "connections": [
            {
                "service_id": str(c.id),
                "partner": name,
                "scope": c.scope,
                "partner_metadata": c.partner_metadata,
                "created_at": _iso(c.created_at),
                "updated_at": _iso(c.updated_at),
                "revoked_at": _iso(c.revoked_at),
            }
            for c, name in connections
        ],
        "receipts": [
            {
                "receipt_id": str(r.id),
                "received_via": d.via,
                "received_at": _iso(d.created_at),
                # The stored bytes as they are, so that the signature verifies over them.
                "receipt": orjson.Fragment(r.document.encode("utf-8", errors="replace")),
                "signature": r.signature,
            }
            for d, r in deliveries
        ],
    }


def _iso(moment: datetime | None) -> str | None:
    return iso_utc(moment) if moment is not None else None


def delete_account(session: Session, user: User, *, now: datetime) -> None:
    """Delete the account: every connection is revoked (partners are told), the receipts are no
    longer the user's, cards are detached, sessions and e-mail tokens end, and the address and
    password are erased. The row stays, anonymous, because revoked connections refer to it."""
    for connection in session.scalars(
        select(Connection).where(Connection.user_id == user.id, Connection.revoked_at.is_(None))
    ):
        revoke_connection(session, connection, now=now)
    session.execute(delete(ReceiptDelivery).where(ReceiptDelivery.user_id == user.id))
    session.execute(update(Card).where(Card.user_id == user.id).values(user_id=None))
    session.execute(update(CardMatch).where(CardMatch.user_id == user.id).values(user_id=None))
    session.execute(delete(UserToken).where(UserToken.user_id == user.id))
    end_all_sessions(session, user.id)
    user.email = f"deleted-{user.id}@deleted.invalid"
    user.password_hash = "!"  # matches no password  # noqa: S105
    user.email_verified_at = None
    user.deleted_at = now
    session.flush()
