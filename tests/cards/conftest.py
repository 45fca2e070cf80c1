from __future__ import annotations

import httpx
import pytest

from kuitti.clock import FrozenClock
from kuitti.services import Services
from tests.cards.support import World, make_world


@pytest.fixture
def world(services: Services, client: httpx.Client, clock: FrozenClock) -> World:
    return make_world(services, client, clock)
