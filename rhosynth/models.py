"""The client's typed results: the API's wire types, as the client reads them.

They mirror the server's response models (app/*/schemas.py) field for field; the client does not
import the server, so tests/client/test_models.py compares each of them with the service's
OpenAPI document and fails on any drift. Exact ρ and δ amounts are :class:`~decimal.Decimal`
(the service sends them as decimal strings). Unknown fields are ignored, so an older client keeps
working against a newer service.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# Exact amounts travel as decimal strings; documented as the service documents them.
Amount = Annotated[Decimal, Field(json_schema_extra={"type": "string", "format": "decimal"})]

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
SampleStatus = Literal["queued", "running", "succeeded", "failed", "expired", "deleted"]
FINISHED: frozenset[str] = frozenset(
    {"succeeded", "failed", "cancelled", "rejected", "expired", "deleted"}
)


class _Wire(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)


class Budget(_Wire):
    """A dataset's privacy budget (zCDP ρ; δ only for DP discovery at upload)."""

    total_rho: Amount
    spent_rho: Amount
    reserved_rho: Amount
    remaining_rho: Amount
    total_delta: Amount
    spent_delta: Amount
    remaining_delta: Amount


class Column(_Wire):
    """A stored column of a dataset's public schema."""

    name: str
    type: Literal["categorical", "numeric", "date", "datetime", "boolean", "codes"]
    size: int
    categories: list[str] | None = None
    bins: list[float] | list[str] | None = None
    profile: list[float] | list[str] | None = None
    nullable: bool = False
    other: str | None = None
    ordered: bool = False
    integer: bool = False
    decimals: int | None = None
    clip: bool = False
    format: str | None = None
    resolution: str | None = None
    true_values: list[str] | None = None
    false_values: list[str] | None = None
    discovered: bool = False

    @property
    def domain(self) -> list[float] | list[str] | None:
        """The bin edges (numbers, or ISO 8601 dates) or the categories; None for codes and
        booleans."""
        return self.bins if self.bins is not None else self.categories


class DomainWarning(_Wire):
    """Something the upload noticed about a dataset's domain (docs/api.md, "Domain warnings")."""

    code: str
    column: str | None
    message: str

    def __str__(self) -> str:
        return self.message


class Truncation(_Wire):
    """What truncation to k rows per person removed at upload: a DP count for every key, the
    ``exact_*`` figures for owner keys only (None for analysts)."""

    units_truncated: int
    rows_removed_at_least: int
    cap: int
    sigma: float
    rho: Amount
    exact_rows_removed: int | None = None
    exact_units_truncated: int | None = None
    exact_units: int | None = None
    exact_rows_without_unit: int | None = None


class PrivacyUnit(_Wire):
    """A dataset's privacy unit: ρ and ε hold per person, at most ``max_rows`` rows
    (``column`` for owner keys only; it is never stored or released)."""

    column: str | None
    max_rows: int
    guarantee: str
    truncation: Truncation | None = None


class Source(_Wire):
    """Where a registered dataset lives (docs/sources.md). ``kind``, ``keep_copy`` and ``engine``
    for every key; the location and fingerprint for owner keys only (None for analysts)."""

    kind: Literal["s3", "local", "postgres"]
    keep_copy: bool
    engine: Literal["duckdb", "spark"] | None = None
    uri: str | None = None
    format: str | None = None
    connection: str | None = None
    table: str | None = None
    query: str | None = None
    fingerprint: dict[str, Any] | None = None


class Dataset(_Wire):
    """An uploaded dataset: its public schema and budget (``n_rows`` for owner keys only), and
    the warnings its upload gave about the domain. ``privacy`` says what ρ and ε protect
    (``"per row"`` or ``"per person, at most k rows"``)."""

    id: uuid.UUID
    name: str
    columns: list[Column]
    warnings: list[DomainWarning] = Field(default_factory=list)
    dropped_columns: list[str] = Field(default_factory=list)
    # The declared cross-column rules every synthetic table keeps (normalised JSON; public).
    rules: list[dict[str, Any]] = Field(default_factory=list)
    created_at: datetime
    deleted_at: datetime | None
    budget: Budget
    n_rows: int | None
    privacy: str = "per row"
    privacy_unit: PrivacyUnit | None = None
    origin: Literal["upload", "source"] = "upload"
    source: Source | None = None

    @property
    def learned_domains(self) -> dict[str, list[float] | list[str]]:
        """Each column whose bins or categories were learned with DP at upload (DP outputs,
        public), by name: its bin edges or its categories."""
        return {c.name: c.domain for c in self.columns if c.discovered and c.domain is not None}


class LedgerEntry(_Wire):
    """One entry of a dataset's append-only privacy ledger."""

    id: int
    kind: Literal["grant", "reserve", "spend", "release", "discover"]
    rho: Amount
    delta: Amount
    job_id: uuid.UUID | None
    actor: str
    at: datetime
    detail: dict[str, Any] | None
    privacy: str = "per row"
    actor_name: str | None = None


class AuditEntry(_Wire):
    """One entry of the tenant's audit trail (``GET /v1/audit``; admin keys). Verify a chain
    with :func:`rhosynth.audit.verify_audit_chain` on the export's lines, as written."""

    tenant_id: uuid.UUID
    seq: int
    at: datetime
    actor: str
    actor_name: str | None
    action: str
    object_type: str
    object_id: str
    request_id: str | None
    details: dict[str, Any]
    prev_hash: str
    hash: str


class Ledger(_Wire):
    """A dataset's ledger (every page, oldest first) and its budget now."""

    dataset_id: uuid.UUID
    budget: Budget
    privacy: str = "per row"
    items: list[LedgerEntry]
    next_after: int | None


class Progress(_Wire):
    fraction: float
    stage: str


class Queue(_Wire):
    """Where a queued job stands, counted on the queue as it stood at ``as_of`` (the last whole
    UTC minute): ``position`` 1 is the next of the tenant's queued jobs; ``jobs_ahead`` counts
    every tenant's queued jobs the workers' fair order starts before it (an estimate)."""

    as_of: datetime
    position: int
    jobs_ahead: int


class Job(_Wire):
    """A synthesis job: its request, status and public progress."""

    id: uuid.UUID
    dataset_id: uuid.UUID
    method: str
    params: dict[str, Any]
    status: JobStatus
    rho: Amount
    epsilon: str | None
    delta: str | None
    privacy_unit: str = "per row"
    unit_max_rows: int | None = None
    rows: int | None
    seed: int | None
    progress: Progress
    progress_detail: Progress | None
    cancel_requested: bool
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    error: str | None
    output_rows: int | None
    decided_at: datetime | None = None
    decision_reason: str | None = None
    artefacts: list[str] = Field(default_factory=list)
    queue: Queue | None = None

    @property
    def finished(self) -> bool:
        return self.status in FINISHED


class Method(_Wire):
    """A synthesis method and the JSON schema of its ``params``."""

    name: str
    description: str
    params_schema: dict[str, Any]
    resamplable: bool


class NoisePreview(_Wire):
    description: str
    attributes: list[str]
    sensitivity: float
    sigma: float
    rho: float


class EpsilonAtDelta(_Wire):
    delta: str
    conversion_delta: str
    discovery_delta: str
    epsilon: str


class CostPrediction(_Wire):
    rows: int
    rows_source: Literal["requested", "dataset", "previous_release"]
    seconds: float
    seconds_factor: float
    peak_memory_bytes: int
    memory_factor: float


class JobLimits(_Wire):
    memory_limit_bytes: int
    time_limit_seconds: int
    max_output_rows: int
    memory_upper_bound_bytes: int


class JobPreview(_Wire):
    """What a submission would cost (``estimate``); nothing was reserved or written."""

    method: str
    params: dict[str, Any]
    rows: int | None
    rho: Amount
    epsilon: str | None
    delta: str | None
    privacy_unit: str = "per row"
    unit_max_rows: int | None = None
    privacy_profile: list[EpsilonAtDelta]
    discovery_delta: str
    remaining_rho: Amount
    remaining_rho_after: Amount | None
    would_exceed_budget: bool
    quota: str | None = None
    quota_remaining_rho: Amount | None = None
    first_noise: list[NoisePreview]
    prediction: CostPrediction | None
    limits: JobLimits


class Sample(_Wire):
    """More rows drawn from a job's fitted model: post-processing, no ρ."""

    id: uuid.UUID
    job_id: uuid.UUID
    dataset_id: uuid.UUID
    rows: int
    seed: int
    rho: Literal["0"] = "0"
    status: SampleStatus
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    error: str | None
    output_rows: int | None

    @property
    def finished(self) -> bool:
        return self.status in FINISHED


class DraftColumnReason(_Wire):
    name: str
    reason: str


class PrivacyUnitSuggestion(_Wire):
    """A draft's suggested privacy unit (not in its schema): the column, the default k, why."""

    column: str
    max_rows: int
    reason: str


class SchemaDraft(_Wire):
    """A proposed schema (``schema`` is ready to upload as is) and why each column got it;
    ``privacy_unit``: a suggested unit to add as the schema's ``privacy_unit`` if you choose."""

    schema_: dict[str, Any] = Field(alias="schema", serialization_alias="schema")
    reasons: list[DraftColumnReason]
    rows: int
    discovers: bool
    show_values: bool
    warning: str | None = None
    privacy_unit: PrivacyUnitSuggestion | None = None


KeyRole = Literal["owner", "analyst", "admin"]


class ApiKey(_Wire):
    """A key of the tenant as admin keys see it: never its secret."""

    id: uuid.UUID
    name: str
    role: KeyRole
    prefix: str
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    retires_at: datetime | None
    datasets: list[uuid.UUID]


class CreatedKey(ApiKey):
    """A new key with its secret, which the service shows this once (``key``; not in repr)."""

    key: str = Field(repr=False)


class KeyPolicy(_Wire):
    """The tenant's key policy (admin keys): may owner keys create analyst keys limited to
    datasets they see, and manage the keys they created?"""

    owners_create_analyst_keys: bool


# The server's name of each model (the OpenAPI components the drift test compares them with).
WebhookEvent = Literal[
    "job.succeeded",
    "job.failed",
    "job.cancelled",
    "sample.ready",
    "budget.below_threshold",
    "approval.requested",
    "approval.decided",
]


class Webhook(_Wire):
    """A webhook subscription of the tenant (admin keys); never its secret."""

    id: uuid.UUID
    url: str
    events: list[str]
    description: str
    enabled: bool
    budget_threshold_rho: Amount | None
    created_at: datetime


class CreatedWebhook(Webhook):
    """A new subscription with its signing secret: shown in this answer only."""

    secret: str


class WebhookDelivery(_Wire):
    """One event owed to one subscription, and how its sending went."""

    id: uuid.UUID
    event_id: uuid.UUID
    event_type: str
    status: Literal["pending", "delivered", "failed", "discarded"]
    attempts: int
    last_status_code: int | None
    last_error: str | None
    last_attempt_at: datetime | None
    next_attempt_at: datetime | None
    delivered_at: datetime | None
    created_at: datetime


class Quota(_Wire):
    """A key's or a group's share of a dataset's ρ (issue 27 §2)."""

    id: uuid.UUID
    kind: Literal["key", "group"]
    key_id: uuid.UUID | None
    group: str | None
    keys: list[uuid.UUID]
    granted_rho: Amount
    reserved_rho: Amount
    spent_rho: Amount
    remaining_rho: Amount
    available_rho: Amount


class QuotaPolicy(_Wire):
    """How a dataset's quotas relate to its budget, and whether jobs wait for approval."""

    mode: Literal["shared", "reserved"]
    quota_required: bool
    approval_required: bool
    quotas_unused_rho: Amount
    dataset_remaining_rho: Amount


class Quotas(_Wire):
    policy: QuotaPolicy
    items: list[Quota]


class Approval(_Wire):
    """A job waiting for an owner's approval, with what it would cost."""

    job: Job
    preview: JobPreview | None
    preview_error: str | None = None


SERVER_NAMES: dict[type[BaseModel], str] = {
    Quota: "QuotaOut",
    QuotaPolicy: "QuotaPolicyOut",
    Quotas: "QuotaList",
    Approval: "ApprovalOut",
    Budget: "BudgetOut",
    Column: "ColumnOut",
    DomainWarning: "DomainWarningOut",
    Truncation: "TruncationOut",
    PrivacyUnit: "PrivacyUnitOut",
    Dataset: "DatasetOut",
    Source: "SourceOut",
    LedgerEntry: "LedgerEntryOut",
    Ledger: "LedgerOut",
    Progress: "ProgressOut",
    Queue: "QueueOut",
    Job: "JobOut",
    Method: "MethodOut",
    NoisePreview: "NoisePreviewOut",
    EpsilonAtDelta: "EpsilonAtDeltaOut",
    CostPrediction: "CostPredictionOut",
    JobLimits: "JobLimitsOut",
    JobPreview: "JobPreview",
    Sample: "SampleOut",
    DraftColumnReason: "DraftColumnReason",
    PrivacyUnitSuggestion: "PrivacyUnitSuggestion",
    SchemaDraft: "SchemaDraftOut",
    ApiKey: "KeyOut",
    CreatedKey: "CreatedKeyOut",
    KeyPolicy: "KeyPolicy",
    Webhook: "WebhookOut",
    CreatedWebhook: "CreatedWebhookOut",
    WebhookDelivery: "DeliveryOut",
}
