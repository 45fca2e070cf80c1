"""Dynamic QR code values (docs/delivery.md, "Dynamic QR codes").

An app asks for a value for one of its connections (``POST /api/v1/qr-codes/``) and shows it as a
QR code; the till scans it and posts the receipt with a ``DYNAMIC_QR_CODE`` token carrying the
value and namespace. The receipt then goes to that connection's user.

A value is 128 random bits (unguessable; only its SHA-256 is stored, so a database reader cannot
use live values), lives ``KUITTI_QR_CODE_TTL_SECONDS`` (default 600 s) and may be used by several
receipts within that time (one purchase can produce more than one receipt at the till).
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete
from sqlalchemy.orm import Session

from kuitti.clock import iso_utc
from kuitti.errors import Forbidden
from kuitti.models import Connection, DynamicQrCode, Partner

QR_VALUE_BYTES = 16


@dataclass(frozen=True)
class IssuedQrCode:
    value: str
    namespace: str
    expires_at: datetime

    def as_json(self) -> dict[str, str]:
        return {
            "value": self.value,
            "namespace": self.namespace,
            "expires_at": iso_utc(self.expires_at),
        }


def value_hash(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def issue_qr_code(
    session: Session, connection: Connection, *, ttl_seconds: int, now: datetime
) -> IssuedQrCode:
    """A new value for the connection, in its app partner's first namespace."""
    partner = session.get(Partner, connection.partner_id)
    assert partner is not None
    if not partner.namespaces:
        raise Forbidden(
            "This application has no namespace; ask the operator to give it one "
            "(kuitti partner create --namespace …) before requesting QR codes.",
            code="no_namespace",
        )
    namespace = partner.namespaces[0].name
    value = secrets.token_urlsafe(QR_VALUE_BYTES)
    expires_at = now + timedelta(seconds=ttl_seconds)
    # Expired values are useless; clear them as new ones are made (keeps the table small).
    session.execute(delete(DynamicQrCode).where(DynamicQrCode.expires_at <= now))
    session.add(
        DynamicQrCode(
            value_hash=value_hash(value),
            connection_id=connection.id,
            namespace=namespace,
            created_at=now,
            expires_at=expires_at,
        )
    )
    return IssuedQrCode(value=value, namespace=namespace, expires_at=expires_at)


def connection_for_qr_value(
    session: Session, value: str, namespace: str, *, now: datetime
) -> Connection | None:
    """The active connection a value was issued for, or None when the value is unknown,
    expired, given with another namespace, or its connection was revoked."""
    code = session.get(DynamicQrCode, value_hash(value))
    if code is None or code.namespace != namespace or code.expires_at <= now:
        return None
    connection = session.get(Connection, code.connection_id)
    if connection is None or not connection.active:
        return None
    return connection
