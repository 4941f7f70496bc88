"""Wire types for schema drafts."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class DraftColumnReason(BaseModel):
    name: str
    reason: str = Field(description="why the column got this proposal (names no value)")


class PrivacyUnitSuggestion(BaseModel):
    column: str
    max_rows: int = Field(description="the default k (rows kept per person)")
    reason: str = Field(description="why, and the trade-off (names no value)")


class SchemaDraftOut(BaseModel):
    schema_: dict[str, Any] = Field(
        alias="schema",
        serialization_alias="schema",
        description='the proposed {"columns": [...]} schema, ready to upload as is',
    )
    reasons: list[DraftColumnReason]
    rows: int = Field(description="rows read (the draft is for the owner who sent the file)")
    discovers: bool = Field(
        description="whether the schema asks for DP discovery, charged at upload"
    )
    show_values: bool
    warning: str | None = Field(
        default=None,
        description="what the schema takes from the data without DP (each column's kind, date "
        "formats, decimals, number formats, boolean spellings, dropped columns, small-integer "
        "windows) and that nothing else is; with show_values, first that its categories and "
        "bounds are the data's own",
    )

    privacy_unit: PrivacyUnitSuggestion | None = Field(
        default=None,
        description="a suggested privacy unit (a column whose name and kind look like a person's "
        "or an account's id), not added to `schema`: add it as the schema's `privacy_unit` to "
        'make ρ and ε hold per person (docs/privacy.md, "Privacy per person")',
    )

    model_config = {"populate_by_name": True}
