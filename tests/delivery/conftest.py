"""Fixtures of the delivery tests (helpers are in ``support``)."""

from __future__ import annotations

import pytest

from kuitti.deps import Services
from kuitti.models import User
from kuitti.partners.service import NewPartner
from tests.delivery.support import make_merchant
from tests.factories import make_user


@pytest.fixture
def merchant(services: Services) -> NewPartner:
    return make_merchant(services)


@pytest.fixture
def user(services: Services) -> User:
    return make_user(services, "maija@example.com")
