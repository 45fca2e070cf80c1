"""Database errors are logged without their bound parameters."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from kuitti.deps import Services


def test_database_errors_hide_their_parameters(services: Services) -> None:
    secret = "parameter-SECRET-42"
    with pytest.raises(DBAPIError) as caught, services.db.session() as session:
        session.execute(text("SELECT * FROM no_such_table WHERE v = :v"), {"v": secret})
    assert secret not in str(caught.value)
