"""Warnings about a domain, for the owner (and anyone who may see the dataset).

Every warning is a function of public information only: the declared schema, the budgets, and
the DP outputs of discovery (learned edges and categories, noisy counts). Messages name columns
and public numbers, never a raw value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DomainWarning:
    """One warning: a machine-readable ``code``, the ``column`` it is about (None: the whole
    dataset) and a short, actionable ``message``."""

    code: str
    column: str | None
    message: str

    def __post_init__(self) -> None:
        if not isinstance(self.code, str) or not self.code:
            raise ValueError("a warning needs a code")
        if self.column is not None and not isinstance(self.column, str):
            raise TypeError("a warning's column is a name or None")
        if not isinstance(self.message, str) or not self.message:
            raise ValueError("a warning needs a message")

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "column": self.column, "message": self.message}

    @classmethod
    def from_json(cls, raw: Any) -> DomainWarning:
        if not isinstance(raw, dict):
            raise TypeError("a stored warning is a JSON object")
        return cls(str(raw["code"]), raw.get("column"), str(raw["message"]))


__all__ = ["DomainWarning"]
