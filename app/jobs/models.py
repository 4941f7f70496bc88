"""Jobs and idempotency keys.

The database row is the truth about a job; the broker is only a doorbell.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    CheckConstraint,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    String,
    Text,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, new_id, utcnow
from app.db.types import Rho

JOB_STATUSES = (
    "pending_approval",
    "queued",
    "running",
    "succeeded",
    "failed",
    "cancelled",
    "rejected",
    "expired",
)
TERMINAL_STATUSES = ("succeeded", "failed", "cancelled", "rejected", "expired")
STATUS_CHECK = "status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')"
STATUS_CHECK_WITH_APPROVALS = (
    "status IN ('pending_approval', 'queued', 'running', 'succeeded', 'failed', 'cancelled', "
    "'rejected', 'expired')"
)


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        CheckConstraint(STATUS_CHECK_WITH_APPROVALS, name="status"),
        CheckConstraint("rho > 0", name="rho_positive"),
        CheckConstraint("attempt >= 0", name="attempt_nonnegative"),
        CheckConstraint("progress_fraction >= 0 AND progress_fraction <= 1", name="progress"),
        CheckConstraint("rows IS NULL OR rows >= 1", name="rows_positive"),
        # Privacy rule 1: a job that ever ran has been charged.
        CheckConstraint("started_at IS NULL OR charged_at IS NOT NULL", name="charged_if_started"),
        CheckConstraint(
            "status <> 'succeeded' OR output_key IS NOT NULL", name="output_if_succeeded"
        ),
        Index("ix_jobs_status_lease", "status", "lease_expires_at"),
        Index("ix_jobs_status_tenant", "status", "tenant_id"),
        Index("ix_jobs_tenant_started", "tenant_id", "started_at"),
        Index("ix_jobs_finished_at", "finished_at"),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=new_id)
    tenant_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("tenants.id"), index=True)
    dataset_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("datasets.id"), index=True)
    method: Mapped[str] = mapped_column(String(64))
    params: Mapped[dict[str, Any]] = mapped_column(JSON)
    rho: Mapped[Decimal] = mapped_column(Rho())
    # The (ε, δ) the analyst asked for, as exact decimal text, when the budget was given that way.
    epsilon: Mapped[str | None] = mapped_column(String(64))
    delta: Mapped[str | None] = mapped_column(String(64))
    rows: Mapped[int | None] = mapped_column(BigInteger)
    seed: Mapped[int | None] = mapped_column(BigInteger)
    # The dataset's privacy unit bound k at submission (NULL: row-level): ρ and ε hold "per
    # person, at most k rows" (issue 28 §1).
    unit_max_rows: Mapped[int | None] = mapped_column(default=None)

    status: Mapped[str] = mapped_column(String(16), default="queued")
    attempt: Mapped[int] = mapped_column(default=0)
    cancel_requested: Mapped[bool] = mapped_column(default=False)
    # What every key of the tenant sees: a function of public information only (docs/privacy.md).
    progress_fraction: Mapped[float] = mapped_column(default=0.0)
    progress_stage: Mapped[str] = mapped_column(String(64), default="queued")
    # The engine's own progress, which can depend on the noise: owner keys only.
    detail_fraction: Mapped[float | None] = mapped_column(default=None)
    detail_stage: Mapped[str | None] = mapped_column(String(64), default=None)
    # Wall-clock limit of the running attempt, set at each claim.
    deadline_at: Mapped[datetime | None] = mapped_column(default=None)
    lease_expires_at: Mapped[datetime | None] = mapped_column(default=None)
    enqueued_at: Mapped[datetime | None] = mapped_column(default=None)

    submitted_by: Mapped[uuid.UUID] = mapped_column(ForeignKey("api_keys.id"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    charged_at: Mapped[datetime | None] = mapped_column(default=None)
    started_at: Mapped[datetime | None] = mapped_column(default=None)
    finished_at: Mapped[datetime | None] = mapped_column(default=None)
    error: Mapped[str | None] = mapped_column(Text, default=None)

    # Owner approval (issue 27 §3): who decided, when, and the reason given to the analyst.
    # The deciding key's id (no foreign key: added in place on SQLite by migration 0014).
    decided_by: Mapped[uuid.UUID | None] = mapped_column(default=None)
    decided_at: Mapped[datetime | None] = mapped_column(default=None)
    decision_reason: Mapped[str | None] = mapped_column(Text, default=None)

    output_key: Mapped[str | None] = mapped_column(String(500), default=None)
    output_rows: Mapped[int | None] = mapped_column(BigInteger, default=None)
    # Names of the artefacts published with the output (app/reports/artefacts.py), stored under
    # the published attempt's artefact prefix; None for jobs that succeeded before they existed.
    artefacts: Mapped[list[str] | None] = mapped_column(JSON, default=None)
    # The owner tier of the report, built after publication by a reports worker
    # (app/jobs/owner_tier.py): pending, built or failed; None for jobs without one.
    owner_tier: Mapped[str | None] = mapped_column(String(16), default=None, index=True)
    owner_tier_tries: Mapped[int] = mapped_column(default=0, server_default=text("0"))
    owner_tier_sent_at: Mapped[datetime | None] = mapped_column(default=None)


class IdempotencyKey(Base):
    """One row per (tenant, Idempotency-Key): the hash of the first request and the job it made."""

    __tablename__ = "idempotency_keys"
    __table_args__ = (
        # Deferred so the key row can be written before the job row in the same transaction:
        # claiming the key first is what makes 50 identical parallel requests reserve once.
        ForeignKeyConstraint(
            ["job_id"],
            ["jobs.id"],
            deferrable=True,
            initially="DEFERRED",
            name="fk_idempotency_keys_job_id_jobs",
        ),
    )

    tenant_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("tenants.id"), primary_key=True)
    key: Mapped[str] = mapped_column(String(255), primary_key=True)
    request_hash: Mapped[str] = mapped_column(String(64))
    job_id: Mapped[uuid.UUID]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
