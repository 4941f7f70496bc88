"""Wire types for jobs and methods."""

from __future__ import annotations

import uuid
from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from app.api.types import (
    EPSILON_DELTA_TAG,
    MAX_DELTA,
    RHO_TAG,
    DecimalIn,
    RhoIn,
    RhoOut,
    check_rho_scale,
    check_significant_digits,
    decimal_json_schema,
)

# δ (and ε) below 1e-30 make no practical difference to the ρ they convert to, and their exact
# text must fit the job's 64-character columns.
MIN_EPSILON_DELTA = Decimal("1e-30")
# 28: the precision of the decimal context that normalises the stored text.
MAX_EPSILON_DELTA_DIGITS = 28


class RhoBudgetIn(BaseModel):
    """A budget given directly in ρ (zero-concentrated DP)."""

    model_config = ConfigDict(extra="forbid")

    rho: RhoIn

    @field_validator("rho")
    @classmethod
    def _scale(cls, value: Decimal) -> Decimal:
        return check_rho_scale(value)


class EpsilonDeltaBudgetIn(BaseModel):
    """A budget given as (ε, δ); converted to the largest ρ whose CKS bound meets it."""

    model_config = ConfigDict(extra="forbid")

    epsilon: Annotated[
        DecimalIn,
        Field(ge=MIN_EPSILON_DELTA, le=1000),
        decimal_json_schema("1e-30 ≤ ε ≤ 1000", minimum=MIN_EPSILON_DELTA, maximum=1000),
    ]
    delta: Annotated[
        DecimalIn,
        Field(ge=MIN_EPSILON_DELTA, le=MAX_DELTA),
        decimal_json_schema(
            "1e-30 ≤ δ ≤ 0.001", minimum=MIN_EPSILON_DELTA, maximum=float(MAX_DELTA)
        ),
    ]

    @model_validator(mode="before")
    @classmethod
    def _both(cls, value: Any) -> Any:
        # One sentence instead of "delta: Field required" next to the other form's errors.
        if isinstance(value, dict) and not {"epsilon", "delta"} <= value.keys():
            missing = "delta" if "epsilon" in value else "epsilon"
            raise PydanticCustomError(
                "budget_form",
                f"{missing} is missing: an (ε, δ) budget gives both epsilon and delta "
                "(or give rho alone)",
            )
        return value

    @field_validator("epsilon", "delta")
    @classmethod
    def _digits(cls, value: Decimal) -> Decimal:
        # With at most 28 significant digits and a value of at least 1e-30, the exact text the
        # job keeps (plain notation) fits its 64-character column.
        return check_significant_digits(value, MAX_EPSILON_DELTA_DIGITS)


BUDGET_FORM_MESSAGE = "give either rho, or epsilon and delta (not both)"


def _budget_form(value: Any) -> str | None:
    """Which of the two budget forms a body is, from its keys alone: ``rho`` or ``epsilon_delta``
    (app.api.types.UNION_TAGS); None (one error, :data:`BUDGET_FORM_MESSAGE`) when it has both
    or neither. Without this, pydantic tried both forms and reported every error of both
    ("budget.RhoBudgetIn.rho: Field required; budget.EpsilonDeltaBudgetIn.rho: Extra inputs are
    not permitted; ...", issue 26 §2)."""
    if isinstance(value, RhoBudgetIn):
        return RHO_TAG
    if isinstance(value, EpsilonDeltaBudgetIn):
        return EPSILON_DELTA_TAG
    if not isinstance(value, dict):
        return None
    has_rho, has_epsilon_delta = "rho" in value, bool({"epsilon", "delta"} & value.keys())
    if has_rho == has_epsilon_delta:
        return None
    return RHO_TAG if has_rho else EPSILON_DELTA_TAG


BudgetIn = Annotated[
    Annotated[RhoBudgetIn, Tag(RHO_TAG)] | Annotated[EpsilonDeltaBudgetIn, Tag(EPSILON_DELTA_TAG)],
    Discriminator(
        _budget_form,
        custom_error_type="budget_form",
        custom_error_message=BUDGET_FORM_MESSAGE,
    ),
]


class JobRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    method: str = Field(min_length=1, max_length=64, description="see GET /v1/methods")
    budget: BudgetIn = Field(description='either {"rho": ...} or {"epsilon": ..., "delta": ...}')
    rows: int | None = Field(
        default=None,
        ge=1,
        description="rows to synthesise; default: the mechanism's noisy estimate of the row count",
    )
    seed: int | None = Field(
        default=None,
        ge=0,
        le=2**53 - 1,  # exact in every JSON implementation
        description="seeds post-processing (model fitting, sampling) only, never DP noise",
    )
    params: dict[str, Any] = Field(default_factory=dict)


class ProgressOut(BaseModel):
    fraction: float = Field(description="in [0, 1]")
    stage: str


JobStatus = Literal[
    "pending_approval",
    "queued",
    "running",
    "succeeded",
    "failed",
    "cancelled",
    "rejected",
    "expired",
]


class QueueOut(BaseModel):
    """Where a queued job stands, counted on the queue as it stood at ``as_of`` (counts only:
    no other tenant's names or jobs)."""

    as_of: datetime = Field(
        description="the whole UTC minute before the last: the counts are those of the queue at "
        "that time "
        "(a job submitted since counts at the end of its tenant's queue of then)"
    )
    position: int = Field(description="1 = the next of your tenant's queued jobs to start")
    jobs_ahead: int = Field(
        description="queued jobs of every tenant that the workers' fair order (one job per "
        "tenant in turn) starts before this one if nothing else changes: an estimate"
    )


class JobOut(BaseModel):
    id: uuid.UUID
    dataset_id: uuid.UUID
    method: str
    params: dict[str, Any]
    status: JobStatus
    rho: RhoOut
    epsilon: str | None = Field(description="the ε the budget was requested in, if any")
    delta: str | None = Field(description="the δ the budget was requested in, if any")
    privacy_unit: str = Field(
        default="per row",
        description='what ρ and ε protect: "per row", or "per person, at most k rows" when the '
        "dataset has a privacy unit (issue 28 §1)",
    )
    unit_max_rows: int | None = Field(
        default=None, description="k, the rows kept per person (null: row-level)"
    )
    rows: int | None = Field(description="rows requested (null: the noisy estimate)")
    seed: int | None
    progress: ProgressOut = Field(
        description="public progress: fixed stages and fractions of the method's public "
        "schedule, the same whatever the data and the noise"
    )
    progress_detail: ProgressOut | None = Field(
        description="owner keys only (null for analysts): the engine's own progress, which can "
        "depend on the data and the noise"
    )
    cancel_requested: bool
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    error: str | None
    output_rows: int | None
    decided_at: datetime | None = Field(
        default=None,
        description="when an owner approved or rejected the job, or when it expired unapproved "
        "(datasets with approval on)",
    )
    decision_reason: str | None = Field(
        default=None, description="the owner's reason for a rejection, or why it expired"
    )
    artefacts: list[str] = Field(
        default_factory=list,
        description="the release's artefacts, published with its output (GET .../report, "
        ".../measurements; the owner-tier report names are listed to owner keys only)",
    )
    queue: QueueOut | None = Field(
        default=None,
        description="while queued, where the job stands as of a whole minute at least one "
        "minute old "
        "(GET /v1/jobs/{id} only; null in lists, other answers and once it is not queued)",
    )


class JobList(BaseModel):
    items: list[JobOut]
    next_offset: int | None


class OutputPartOut(BaseModel):
    name: str = Field(description="the part's file name, part-00000.parquet, … (row order)")
    rows: int
    bytes: int = Field(description="the Parquet file's size")
    url: str = Field(description="where to download it (?format=csv for CSV)")


class OutputPartsOut(BaseModel):
    """A large release stored as a partitioned Parquet dataset: its parts, in row order."""

    format: str
    rows: int
    parts: list[OutputPartOut]


class MethodOut(BaseModel):
    name: str
    description: str
    params_schema: dict[str, Any]
    resamplable: bool = Field(
        description="whether a succeeded job keeps a fitted model that more rows can be drawn "
        "from for free (POST /v1/jobs/{id}/samples)"
    )


class MethodList(BaseModel):
    items: list[MethodOut]


class OverBudgetOut(BaseModel):
    detail: str = Field(description="what the request needs, what is left, and what to do")
    requested_rho: RhoOut
    remaining_rho: RhoOut = Field(description="what is left of the limit that refused")
    limit: Literal["dataset", "quota", "unallocated"] = Field(
        default="dataset",
        description="the limit that refused: the dataset's remaining budget, the key's quota, "
        "or (reserved quotas) what the dataset has left beside its quotas' shares",
    )
    quota: str | None = Field(default=None, description="the quota that refused, when one did")
    delta: str | None = Field(
        default=None, description="the request's δ when it gave (ε, δ): the ε below are at it"
    )
    requested_epsilon: str | None = None
    remaining_epsilon: str | None = Field(
        default=None, description="the ε the remaining ρ gives at the request's δ"
    )


class NoisePreviewOut(BaseModel):
    description: str = Field(description="what is released, in public words")
    attributes: list[str]
    sensitivity: float
    sigma: float = Field(description="standard deviation of the discrete Gaussian noise")
    rho: float = Field(description="the ρ this release costs (a share of the job's ρ)")


class EpsilonAtDeltaOut(BaseModel):
    delta: str = Field(
        description="the release's whole δ: conversion_delta + discovery_delta (the release "
        "uses the domain the dataset's discovery published)"
    )
    conversion_delta: str = Field(description="the δ of the conversion from ρ to ε")
    discovery_delta: str = Field(description="the δ the dataset's discovery spent (its ledger)")
    epsilon: str = Field(
        description="the smallest ε the job's ρ guarantees at conversion_delta (CKS)"
    )


class CostPredictionOut(BaseModel):
    rows: int = Field(description="the row count the prediction is for (rows in and out)")
    rows_source: Literal["requested", "dataset", "previous_release"] = Field(
        description="where that count comes from: the request's rows; the dataset's exact row "
        "count (owner keys only); or, for an analyst who gave no rows, the noisy row count of "
        "the dataset's latest release that was sized by its mechanism (a DP output)"
    )
    seconds: float = Field(description="predicted wall seconds of the synthesis")
    seconds_factor: float = Field(
        description="stated error: the calibration runs lay within ×/÷ this factor"
    )
    peak_memory_bytes: int
    memory_factor: float


class JobLimitsOut(BaseModel):
    memory_limit_bytes: int
    time_limit_seconds: int
    max_output_rows: int
    memory_upper_bound_bytes: int = Field(
        description="the deliberate upper bound submissions are refused on (422 above the limit)"
    )


class JobPreview(BaseModel):
    """What a submission would cost; nothing was reserved or written."""

    method: str
    params: dict[str, Any] = Field(description="validated, defaults filled in")
    rows: int | None
    rho: RhoOut = Field(description="the ρ a submission would reserve")
    epsilon: str | None = Field(description="the ε the budget was given in, if any")
    delta: str | None = Field(description="the δ the budget was given in, if any")
    privacy_unit: str = Field(
        default="per row",
        description='what ρ and ε protect: "per row", or "per person, at most k rows" when the '
        "dataset has a privacy unit (issue 28 §1)",
    )
    unit_max_rows: int | None = Field(
        default=None, description="k, the rows kept per person (null: row-level)"
    )
    privacy_profile: list[EpsilonAtDeltaOut] = Field(
        description="the (ε, δ) guarantees of ρ at several δ, each with the discovery's δ added"
    )
    discovery_delta: str = Field(
        description="the δ the dataset's discovery spent (ledger spent_delta), part of every δ"
    )
    remaining_rho: RhoOut = Field(description="the dataset's remaining ρ now")
    remaining_rho_after: RhoOut | None = Field(
        description="remaining ρ after this job (null when it would exceed the budget)"
    )
    would_exceed_budget: bool = Field(
        description="true: a submission would be refused with 409 (requested ρ > remaining ρ, "
        "or > what is left of the key's quota, or, with reserved quotas, > what is left beside "
        "their shares)"
    )
    quota: str | None = Field(
        default=None, description="the quota that limits this key on the dataset, if any"
    )
    quota_remaining_rho: RhoOut | None = Field(
        default=None, description="what is left of that quota now"
    )
    first_noise: list[NoisePreviewOut] = Field(
        description="the first releases the method makes and their noise, from the budget split"
    )
    prediction: CostPredictionOut | None = Field(
        description="predicted time and peak memory (docs/benchmarks.md); null when the row "
        "count is not known to the caller (give rows) or the method is not calibrated"
    )
    limits: JobLimitsOut


class RejectIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: str = Field(
        min_length=1,
        max_length=2000,
        description="shown to the analyst on the job: judge the request, never the data",
    )


class ApprovalOut(BaseModel):
    """A job waiting for an owner's decision, with what it would cost (the dry run's preview;
    its ``remaining_rho`` already counts this job's reservation)."""

    job: JobOut
    preview: JobPreview | None = Field(
        description="null when the request no longer validates (then approving it is refused)"
    )
    preview_error: str | None = None


class ApprovalList(BaseModel):
    items: list[ApprovalOut]
