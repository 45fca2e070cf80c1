"""A real SMTP server (aiosmtpd) on loopback that keeps what it receives."""

from __future__ import annotations

import dataclasses
import email
import email.policy
import threading
from collections.abc import Iterator
from email.message import EmailMessage
from typing import Any

import pytest
from aiosmtpd.controller import Controller

from kuitti.services import Services
from tests.conftest import free_port


class Inbox:
    def __init__(self) -> None:
        self.messages: list[EmailMessage] = []
        self.arrived = threading.Event()

    async def handle_DATA(self, _server: Any, _session: Any, envelope: Any) -> str:
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        assert isinstance(message, EmailMessage)
        self.messages.append(message)
        self.arrived.set()
        return "250 OK"

    def text_of(self, index: int = -1) -> str:
        body = self.messages[index].get_body(preferencelist=("plain",))
        assert body is not None
        content: str = body.get_content()
        return content


@pytest.fixture
def inbox() -> Iterator[Inbox]:
    handler = Inbox()
    port = free_port()
    controller = Controller(handler, hostname="127.0.0.1", port=port)
    controller.start()
    handler.port = port  # type: ignore[attr-defined]
    yield handler
    controller.stop()


@pytest.fixture
def mail_services(services: Services, inbox: Inbox) -> Services:
    """The same database and clock, with settings that send mail to the inbox."""
    settings = services.settings.model_copy(
        update={"smtp_url": f"smtp://127.0.0.1:{inbox.port}"}  # type: ignore[attr-defined]
    )
    return dataclasses.replace(services, settings=settings)
