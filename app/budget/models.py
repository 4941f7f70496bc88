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

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    ForeignKey,
    Index,
    Integer,
    String,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, new_id, utcnow
from app.db.types import Delta, Rho

LEDGER_KINDS = ("grant", "reserve", "spend", "release", "discover")
QUOTA_KINDS = ("set", "reserve", "spend", "release", "remove")
QUOTA_MODES = ("shared", "reserved")


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


class DatasetPolicy(Base):
    """How a dataset's quotas relate to its budget (issue 27 §2); no row: ``shared``, no quota
    required. ``shared``: quotas may add up past the dataset's budget (first come, first served);
    ``reserved``: the quotas' unused parts are kept for them (their sum never passes what the
    dataset has left), so every quota can be used in full. ``quota_required``: analyst keys
    without a quota on the dataset cannot submit. ``approval_required`` (issue 27 §3): jobs of
    analyst keys wait in ``pending_approval`` until an owner approves or rejects them."""

    __tablename__ = "dataset_policies"
    __table_args__ = (CheckConstraint("mode IN ('shared', 'reserved')", name="mode"),)

    dataset_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("datasets.id"), primary_key=True)
    mode: Mapped[str] = mapped_column(String(16))
    quota_required: Mapped[bool] = mapped_column(Boolean)
    approval_required: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class BudgetQuota(Base):
    """A share of a dataset's ρ for one analyst key (``key_id``) or a named group of keys
    (``group_name``, members in ``quota_members``). Its columns move with the dataset's account,
    in the same transaction and after it (lock order: account, then quota); its entries are in
    ``quota_entries``. A removed quota keeps its row (``removed_at``) so that the jobs it
    reserved for still spend or release on it."""

    __tablename__ = "budget_quotas"
    __table_args__ = (
        CheckConstraint("granted_rho >= 0", name="granted_nonnegative"),
        CheckConstraint("reserved_rho >= 0", name="reserved_nonnegative"),
        CheckConstraint("spent_rho >= 0", name="spent_nonnegative"),
        CheckConstraint("reserved_rho + spent_rho <= granted_rho", name="within_granted"),
        CheckConstraint("(key_id IS NULL) <> (group_name IS NULL)", name="key_or_group"),
        # One live quota per key and per group name on a dataset.
        Index(
            "uq_budget_quotas_live_key",
            "dataset_id",
            "key_id",
            unique=True,
            postgresql_where=text("removed_at IS NULL AND key_id IS NOT NULL"),
            sqlite_where=text("removed_at IS NULL AND key_id IS NOT NULL"),
        ),
        Index(
            "uq_budget_quotas_live_group",
            "dataset_id",
            "group_name",
            unique=True,
            postgresql_where=text("removed_at IS NULL AND group_name IS NOT NULL"),
            sqlite_where=text("removed_at IS NULL AND group_name IS NOT NULL"),
        ),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=new_id)
    dataset_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("datasets.id"), index=True)
    key_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("api_keys.id"))
    group_name: Mapped[str | None] = mapped_column(String(100))
    granted_rho: Mapped[Decimal] = mapped_column(Rho())
    reserved_rho: Mapped[Decimal] = mapped_column(Rho())
    spent_rho: Mapped[Decimal] = mapped_column(Rho())
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    removed_at: Mapped[datetime | None] = mapped_column(default=None)


class QuotaMember(Base):
    """Which live quota limits a key on a dataset: at most one (the primary key)."""

    __tablename__ = "quota_members"

    dataset_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("datasets.id"), primary_key=True)
    key_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("api_keys.id"), primary_key=True)
    quota_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("budget_quotas.id"), index=True)


class QuotaEntry(Base):
    """The quota's own append-only ledger: ``set`` (the new granted ρ), ``reserve``/``spend``/
    ``release`` (a job's ρ, beside the dataset ledger's entry of the same kind) and ``remove``."""

    __tablename__ = "quota_entries"
    __table_args__ = (
        CheckConstraint("kind IN ('set', 'reserve', 'spend', 'release', 'remove')", name="kind"),
        CheckConstraint("rho >= 0", name="rho_nonnegative"),
        CheckConstraint("rho > 0 OR kind IN ('set', 'remove')", name="rho_positive"),
        CheckConstraint(
            "kind IN ('set', 'remove') OR job_id IS NOT NULL", name="job_for_job_entries"
        ),
    )

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True
    )
    quota_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("budget_quotas.id"), index=True)
    kind: Mapped[str] = mapped_column(String(16))
    rho: Mapped[Decimal] = mapped_column(Rho())
    job_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("jobs.id"), index=True)
    actor: Mapped[str] = mapped_column(String(64))
    at: Mapped[datetime] = mapped_column(default=utcnow)
