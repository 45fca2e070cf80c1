"""Fixtures of the delivery tests (helpers are in ``support``)."""

from __future__ import annotations

from typing import Any

import pytest

from kuitti.models import User
from kuitti.partners.service import NewPartner
from kuitti.services import Services
from tests.conftest import LiveServer
from tests.delivery.support import make_merchant
from tests.factories import make_user


@pytest.fixture
def merchant(services: Services) -> NewPartner:
    return make_merchant(services)


@pytest.fixture
def user(services: Services) -> User:
    return make_user(services, "maija@example.com")


@pytest.fixture(autouse=True)
def fresh_link_rate_limit(live_server: LiveServer) -> None:
    """Every test starts at the same frozen minute, so the shared server's per-client link
    limits would otherwise count requests across tests."""
    app: Any = live_server.server.config.app
    app.state.services.link_rate_limiter.clear()
    app.state.services.link_misses.clear()
