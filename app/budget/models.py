"""Budget accounts and ledger entries.

The account row holds the running totals and is the row every budget change locks (through a
guarded UPDATE). The ledger is append-only: triggers created by the migration reject UPDATE and
DELETE, and the entries always sum to the account's columns (tests reconcile them).

δ is the second dimension: discovery at upload is (ρ, δ)-approximate zCDP, so an account has a
``total_delta`` (granted) and a ``spent_delta`` (spent by ``discover`` entries); jobs spend ρ only.
The CHECK constraints here are written for PostgreSQL; the migration writes the bound
``total_delta < 1`` in integer units on SQLite (``app.db.types.delta_sql_constant``).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import JSON, BigInteger, CheckConstraint, ForeignKey, Integer, String, text
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, utcnow
from app.db.types import Delta, Rho

LEDGER_KINDS = ("grant", "reserve", "spend", "release", "discover")


class BudgetAccount(Base):
    __tablename__ = "budget_accounts"
    __table_args__ = (
        CheckConstraint("total_rho > 0", name="total_positive"),
        CheckConstraint("spent_rho >= 0", name="spent_nonnegative"),
        CheckConstraint("reserved_rho >= 0", name="reserved_nonnegative"),
        CheckConstraint("spent_rho + reserved_rho <= total_rho", name="within_total"),
        CheckConstraint("total_delta >= 0", name="total_delta_nonnegative"),
        CheckConstraint("spent_delta >= 0", name="spent_delta_nonnegative"),
        CheckConstraint("spent_delta <= total_delta", name="delta_within_total"),
        CheckConstraint("total_delta < 1", name="total_delta_below_one"),
    )

    dataset_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("datasets.id"), primary_key=True)
    total_rho: Mapped[Decimal] = mapped_column(Rho())
    spent_rho: Mapped[Decimal] = mapped_column(Rho())
    reserved_rho: Mapped[Decimal] = mapped_column(Rho())
    total_delta: Mapped[Decimal] = mapped_column(Delta(), server_default=text("0"))
    spent_delta: Mapped[Decimal] = mapped_column(Delta(), server_default=text("0"))
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class LedgerEntry(Base):
    __tablename__ = "ledger_entries"
    __table_args__ = (
        CheckConstraint(
            "kind IN ('grant', 'reserve', 'spend', 'release', 'discover')", name="kind"
        ),
        # Every entry but a discover entry moves ρ; a discover entry moves ρ or δ or both.
        CheckConstraint("rho > 0 OR kind = 'discover'", name="rho_positive"),
        CheckConstraint("rho >= 0", name="rho_nonnegative"),
        CheckConstraint("delta >= 0", name="delta_nonnegative"),
        CheckConstraint("kind <> 'discover' OR rho > 0 OR delta > 0", name="discover_charges"),
        # δ is granted and spent by discovery only; job entries never carry δ.
        CheckConstraint("delta = 0 OR kind IN ('grant', 'discover')", name="delta_kinds"),
        CheckConstraint(
            "kind IN ('grant', 'discover') OR job_id IS NOT NULL", name="job_for_job_entries"
        ),
        CheckConstraint("kind <> 'discover' OR job_id IS NULL", name="discover_without_job"),
    )

    # BIGINT on PostgreSQL, INTEGER (the rowid alias) on SQLite, so both autoincrement.
    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True
    )
    dataset_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("datasets.id"), index=True)
    kind: Mapped[str] = mapped_column(String(16))
    rho: Mapped[Decimal] = mapped_column(Rho())
    delta: Mapped[Decimal] = mapped_column(Delta(), server_default=text("0"))
    job_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("jobs.id"), index=True)
    # The API key id for requests, or "worker"/"system" for automatic transitions.
    actor: Mapped[str] = mapped_column(String(64))
    at: Mapped[datetime] = mapped_column(default=utcnow)
    # Discover entries: the mechanism, its parameters and per-column costs (never data values).
    detail: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
