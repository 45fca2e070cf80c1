"""Service user accounts. Passwords are hashed with argon2id."""

from __future__ import annotations

import uuid
from datetime import datetime

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from email_validator import EmailNotValidError, validate_email
from sqlalchemy import select
from sqlalchemy.orm import Session

from kuitti.models import User

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
        id=uuid.uuid4(),
        email=normalized,
        password_hash=hash_password(password),
        email_verified_at=now if verified else None,
        created_at=now,
    )
    session.add(user)
    session.flush()
    return user
