"""Files attached to an outgoing e-mail (the receipt's PDF, built by the formats work)."""

from __future__ import annotations

from sqlalchemy.orm import Session

from kuitti.deps import Services
from kuitti.models import MailMessage


def attachments_for(
    services: Services, session: Session, message: MailMessage
) -> list[tuple[str, bytes]]:
    """(filename, content) pairs for the message; the receipt PDF when it asks for one."""
    return []
