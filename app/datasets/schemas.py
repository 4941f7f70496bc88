"""Wire types for datasets, budgets and the ledger (never ORM objects)."""

from __future__ import annotations

import uuid
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.api.types import (
    DeltaIn,
    DeltaOut,
    RhoIn,
    RhoOut,
    check_delta_scale,
    check_rho_scale,
)
from app.sources.schemas import SourceOut


class BudgetOut(BaseModel):
    total_rho: RhoOut
    spent_rho: RhoOut
    reserved_rho: RhoOut
    remaining_rho: RhoOut
    total_delta: DeltaOut = Field(
        description="δ granted for discovery at upload ((ρ, δ)-approximate zCDP); below 1"
    )
    spent_delta: DeltaOut = Field(description="δ spent by discovery (jobs spend ρ only)")
    remaining_delta: DeltaOut


class ColumnOut(BaseModel):
    """A stored column (normalised); every field is public: declared by the owner, or, where
    ``discovered`` is true, its bins or categories were learned with DP at upload and charged."""

    name: str
    type: Literal["categorical", "numeric", "date", "datetime", "boolean", "codes"]
    size: int = Field(
        description="number of codes the engine sees for this column (a null code included)"
    )
    categories: list[str] | None = None
    bins: list[float] | list[str] | None = Field(
        default=None, description="bin edges (numbers, or ISO 8601 for dates; the last closed)"
    )
    profile: list[float] | list[str] | None = Field(
        default=None,
        description="the values' percentiles 0 … 100 from the first edge to the last (numbers, "
        "or ISO 8601 for dates): synthetic values are drawn inside a bin from them; a learned "
        "range's DP output, or declared",
    )
    nullable: bool = False
    other: str | None = Field(default=None, description="the bucket for undeclared categories")
    ordered: bool = False
    integer: bool = False
    decimals: int | None = None
    clip: bool = False
    format: str | None = Field(
        default=None,
        description="how values are read and written: strftime for dates (a zone with %z or a "
        "final Z), %.Nf (decimal places written) for numbers",
    )
    resolution: str | None = None
    true_values: list[str] | None = None
    false_values: list[str] | None = None
    discovered: bool = Field(
        default=False,
        description="bins or categories learned with DP at upload (a `discover` ledger entry), "
        "not declared",
    )


class DomainWarningOut(BaseModel):
    """Something the upload noticed about the dataset's domain (docs/api.md, "Domain warnings").

    Computed at upload from public information only (the declared or DP-learned edges and
    categories, which columns were discovered, the budgets), so owners and analysts see the same.
    """

    code: str = Field(
        description="machine-readable: small_budget, wide_end_bin, wide_range, one_bin, "
        "all_other, small_discovery_budget (the discovery may add codes of its own)"
    )
    column: str | None = Field(description="the column concerned; null for the whole dataset")
    message: str = Field(description="what to look at and what to do; names no raw value")


class TruncationOut(BaseModel):
    """What truncation to k rows per person removed at upload.

    ``units_truncated`` and ``rows_removed_at_least`` are a DP release (charged at upload as a
    ``discover`` entry; σ each; shown to every key). The ``exact_*`` figures are exact and shown
    to owner keys only (null for analysts)."""

    units_truncated: int = Field(description="people who lost rows (DP count, clamped at 0)")
    rows_removed_at_least: int = Field(
        description="rows removed, each person counted up to `cap` rows (DP, clamped at 0)"
    )
    cap: int
    sigma: float = Field(description="the noise's standard deviation on each DP figure")
    rho: RhoOut = Field(description="what the DP count cost")
    exact_rows_removed: int | None = None
    exact_units_truncated: int | None = None
    exact_units: int | None = None
    exact_rows_without_unit: int | None = Field(
        default=None, description="rows whose unit was missing: dropped (owner keys only)"
    )


class PrivacyUnitOut(BaseModel):
    """The dataset's privacy unit (issue 28 §1): ρ and ε hold per person, at most k rows."""

    column: str | None = Field(
        description="the column that names each row's person or account: read at upload for "
        "truncation only, never stored or released (owner keys only; null for analysts)"
    )
    max_rows: int = Field(description="k: the rows kept per person")
    guarantee: str = Field(description='"per person, at most k rows"')
    truncation: TruncationOut | None = None


class DatasetOut(BaseModel):
    id: uuid.UUID
    name: str
    columns: list[ColumnOut]
    warnings: list[DomainWarningOut] = Field(
        default_factory=list,
        description="what the upload noticed about the domain (a suspicious learned range, a "
        "column all 'other', a small budget...); [] for datasets uploaded before warnings",
    )
    dropped_columns: list[str] = Field(
        default_factory=list, description="columns of the file declared 'ignore': never stored"
    )
    rules: list[dict[str, Any]] = Field(
        default_factory=list,
        description="the declared cross-column rules every synthetic table keeps (docs/api.md, "
        '"Rules"), normalised; public, declared by the owner',
    )
    created_at: datetime
    deleted_at: datetime | None
    budget: BudgetOut
    n_rows: int | None = Field(
        description="the exact row count; shown to owner keys only (null for analysts)"
    )
    privacy: str = Field(
        default="per row",
        description='what ρ and ε protect: "per row", or "per person, at most k rows"',
    )
    privacy_unit: PrivacyUnitOut | None = Field(
        default=None, description="the privacy unit; null for a row-level dataset"
    )
    origin: Literal["upload", "source"] = Field(
        default="upload", description="uploaded, or registered from a source (docs/sources.md)"
    )
    source: SourceOut | None = Field(
        default=None,
        description="a registered dataset's source: its kind for every key, where it lives for "
        "owner keys only; null for an upload",
    )


class DatasetList(BaseModel):
    items: list[DatasetOut]
    next_offset: int | None


class LedgerEntryOut(BaseModel):
    id: int
    kind: Literal["grant", "reserve", "spend", "release", "discover"]
    rho: RhoOut
    delta: DeltaOut = Field(description="δ granted (grant) or spent (discover); 0 otherwise")
    job_id: uuid.UUID | None
    actor: str
    at: datetime
    detail: dict[str, Any] | None = Field(
        description="discover entries: the mechanism, its parameters and per-column costs"
    )
    privacy: str = Field(
        default="per row",
        description='what this entry\'s ρ buys: "per row", or "per person, at most k rows"',
    )
    actor_name: str | None = Field(
        default=None,
        description="the name of the key the actor is (`key:<id>` of your tenant), else null",
    )


class LedgerOut(BaseModel):
    dataset_id: uuid.UUID
    budget: BudgetOut
    privacy: str = Field(
        default="per row",
        description='what the ledger\'s ρ protects: "per row", or "per person, at most k rows"',
    )
    items: list[LedgerEntryOut]
    next_after: int | None = Field(description="pass as ?after= to read the next page")


class GrantRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    add_rho: RhoIn
    add_delta: DeltaIn = Decimal(0)

    @field_validator("add_rho")
    @classmethod
    def _scale(cls, value: Decimal) -> Decimal:
        return check_rho_scale(value)

    @field_validator("add_delta")
    @classmethod
    def _delta_scale(cls, value: Decimal) -> Decimal:
        return check_delta_scale(value)
