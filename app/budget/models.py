"""Budget accounts and ledger entries.

The account row holds the running totals and is the row every budget change locks (through a
guarded UPDATE). The ledger is append-only: triggers created by the migration reject UPDATE and
DELETE, and the entries always sum to the account's columns (tests reconcile them).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from decimal import Decimal

from sqlalchemy import BigInteger, CheckConstraint, ForeignKey, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, utcnow
from app.db.types import Rho

LEDGER_KINDS = ("grant", "reserve", "spend", "release")


class BudgetAccount(Base):
    __tablename__ = "budget_accounts"
    __table_args__ = (
        CheckConstraint("total_rho > 0", name="total_positive"),
        CheckConstraint("spent_rho >= 0", name="spent_nonnegative"),
        CheckConstraint("reserved_rho >= 0", name="reserved_nonnegative"),
        CheckConstraint("spent_rho + reserved_rho <= total_rho", name="within_total"),
    )

    dataset_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("datasets.id"), primary_key=True)
    total_rho: Mapped[Decimal] = mapped_column(Rho())
    spent_rho: Mapped[Decimal] = mapped_column(Rho())
    reserved_rho: Mapped[Decimal] = mapped_column(Rho())
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class LedgerEntry(Base):
    __tablename__ = "ledger_entries"
    __table_args__ = (
        CheckConstraint("kind IN ('grant', 'reserve', 'spend', 'release')", name="kind"),
        CheckConstraint("rho > 0", name="rho_positive"),
        CheckConstraint("kind = 'grant' OR job_id IS NOT NULL", name="job_for_job_entries"),
    )

    # BIGINT on PostgreSQL, INTEGER (the rowid alias) on SQLite, so both autoincrement.
    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True
    )
    dataset_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("datasets.id"), index=True)
    kind: Mapped[str] = mapped_column(String(16))
    rho: Mapped[Decimal] = mapped_column(Rho())
    job_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("jobs.id"), index=True)
    # The API key id for requests, or "worker"/"system" for automatic transitions.
    actor: Mapped[str] = mapped_column(String(64))
    at: Mapped[datetime] = mapped_column(default=utcnow)
