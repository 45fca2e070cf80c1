"""The scopes a partner application may ask for (interface, Authentication rule 1)."""

from __future__ import annotations

from enum import StrEnum


class Scope(StrEnum):
    RECEIPT_READ = "receipt:read"
    RECEIPT_WRITE = "receipt:write"

    @property
    def plain_words(self) -> str:
        match self:
            case Scope.RECEIPT_READ:
                return "read the receipts you receive in kuitti"
            case Scope.RECEIPT_WRITE:
                return "send receipts to your kuitti account"


def parse_scope(value: str) -> list[Scope] | None:
    """Space-separated scopes in a canonical order, or None when one is unknown or none given."""
    parts = value.split(" ")
    if not value or any(p not in Scope._value2member_map_ for p in parts):
        return None
    return [s for s in Scope if s.value in parts]


def scope_string(scopes: list[Scope] | set[Scope]) -> str:
    return " ".join(s.value for s in Scope if s in scopes)
