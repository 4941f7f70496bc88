"""Audit entries: one row per privileged action, append-only, hash-chained per tenant.

The migration (0012_audit) adds triggers that refuse UPDATE and DELETE on both databases (and
TRUNCATE on PostgreSQL); the app only ever inserts. ``prev_hash`` and ``hash`` chain a tenant's
entries (rhosynth/audit.py), so an entry edited or removed behind the database's back is found
by ``rhosynth audit verify``.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, ForeignKey, Index, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, utcnow


class AuditEntry(Base):
    __tablename__ = "audit_entries"
    __table_args__ = (
        # One entry per place in a tenant's chain: a second append onto the same previous entry
        # fails here even if the lock that serialises appends were ever bypassed.
        UniqueConstraint("tenant_id", "seq", name="uq_audit_entries_tenant_id_seq"),
        Index("ix_audit_entries_tenant_id_at", "tenant_id", "at"),
    )

    # BIGINT on PostgreSQL, INTEGER (the rowid alias) on SQLite, so both autoincrement.
    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True
    )
    tenant_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("tenants.id"))
    # 1, 2, 3, ... within the tenant: the chain's order (and the export's).
    seq: Mapped[int] = mapped_column(BigInteger)
    at: Mapped[datetime] = mapped_column(default=utcnow)
    # Principal.actor ("key:<id>"), or "cli" for a key made with ``rhosynth keys create``.
    actor: Mapped[str] = mapped_column(String(64))
    # The key's name when the entry was written (names are the tenant's own words).
    actor_name: Mapped[str | None] = mapped_column(String(200))
    action: Mapped[str] = mapped_column(String(64))
    object_type: Mapped[str] = mapped_column(String(32))
    object_id: Mapped[str] = mapped_column(String(64))
    # The request's X-Request-ID (app/api/request_id.py); None outside a request (the CLI).
    request_id: Mapped[str | None] = mapped_column(String(128))
    # Ids, names the tenant chose and public parameters only (privacy rule 6): never a data
    # value or a row count of a dataset.
    details: Mapped[dict[str, Any]] = mapped_column(JSON)
    prev_hash: Mapped[str] = mapped_column(String(64))
    hash: Mapped[str] = mapped_column(String(64))
