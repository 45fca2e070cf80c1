"""Deleting a row costs index probes, not scans: every column that references a table whose
rows are deleted (receipts, by the sandbox clean-up; webhook deliveries, by the retention)
leads an index, as the migrated database has them. Without one, each deleted row made the
database scan the referencing table for rows that still point at it: 37.7 ms a receipt at two
million stored, when ``receipt_deliveries.receipt_id`` and ``mail_messages.receipt_id`` had none.
"""

from __future__ import annotations

import pytest
from sqlalchemy import inspect

from kuitti.services import Services

DELETED_FROM = ["receipts", "webhook_deliveries", "card_payments"]


@pytest.mark.parametrize("referenced", DELETED_FROM)
def test_every_reference_to_a_deleted_table_leads_an_index(
    services: Services, referenced: str
) -> None:
    schema = inspect(services.db.engine)
    unindexed = []
    for table in schema.get_table_names():
        leading = {tuple(index["column_names"][:1]) for index in schema.get_indexes(table)}
        leading |= {tuple(u["column_names"][:1]) for u in schema.get_unique_constraints(table)}
        leading.add(tuple(schema.get_pk_constraint(table)["constrained_columns"][:1]))
        for key in schema.get_foreign_keys(table):
            first = tuple(key["constrained_columns"][:1])
            if key["referred_table"] == referenced and first not in leading:
                unindexed.append(f"{table}.{','.join(key['constrained_columns'])}")
    assert not unindexed, f"referencing {referenced} without an index: {unindexed}"
