"""Derived samples: more rows drawn from a succeeded job's fitted model, at no privacy cost."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import BigInteger, CheckConstraint, ForeignKey, Index, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, new_id, utcnow

SAMPLE_STATUSES = ("queued", "running", "succeeded", "failed", "expired", "deleted")
"""``expired``: its output was deleted ``RHOSYNTH_SAMPLE_RETENTION_DAYS`` after it finished;
``deleted``: by ``DELETE /v1/samples/{id}`` (migration 0009)."""
LIVE_STATUSES = ("queued", "running")
"""A sample that may still publish: it counts against the live cap and cannot be deleted."""
HOLDING_STATUSES = (*LIVE_STATUSES, "succeeded")
"""The samples whose rows count against the tenant's quota (stored, or to be stored)."""
GONE_STATUSES = ("expired", "deleted")
"""The samples whose output was deleted: downloads answer 410 and the storage sweep keeps
nothing of theirs."""


class Sample(Base):
    """One derived sample of a job's model. It has no ρ and no ledger entry: drawing rows from a
    published model is post-processing (docs/privacy.md, "Free re-sampling")."""

    __tablename__ = "samples"
    __table_args__ = (
        CheckConstraint(
            "status IN ('queued', 'running', 'succeeded', 'failed', 'expired', 'deleted')",
            name="status",
        ),
        CheckConstraint("rows >= 1", name="rows_positive"),
        CheckConstraint("attempt >= 0", name="attempt_nonnegative"),
        CheckConstraint(
            "status <> 'succeeded' OR output_key IS NOT NULL", name="output_if_succeeded"
        ),
        Index("ix_samples_status_lease", "status", "lease_expires_at"),
        Index("ix_samples_status_finished", "status", "finished_at"),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=new_id)
    tenant_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("tenants.id"), index=True)
    dataset_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("datasets.id"), index=True)
    job_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("jobs.id"), index=True)
    rows: Mapped[int] = mapped_column(BigInteger)
    seed: Mapped[int] = mapped_column(BigInteger)
    status: Mapped[str] = mapped_column(String(16), default="queued")
    attempt: Mapped[int] = mapped_column(default=0)
    lease_expires_at: Mapped[datetime | None] = mapped_column(default=None)
    enqueued_at: Mapped[datetime | None] = mapped_column(default=None)
    requested_by: Mapped[uuid.UUID] = mapped_column(ForeignKey("api_keys.id"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(default=None)
    finished_at: Mapped[datetime | None] = mapped_column(default=None)
    error: Mapped[str | None] = mapped_column(Text, default=None)
    output_key: Mapped[str | None] = mapped_column(String(500), default=None)
    output_rows: Mapped[int | None] = mapped_column(BigInteger, default=None)
