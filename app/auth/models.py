"""Tenants and their API keys. Only an HMAC of each key is stored."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import CheckConstraint, ForeignKey, String, false
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, new_id, utcnow

ROLES = ("owner", "analyst", "admin")
"""``admin`` keys manage the tenant's keys (app/auth/endpoints.py) and nothing else."""


class Tenant(Base):
    __tablename__ = "tenants"

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # The admin's switch: owner keys may create analyst keys for their datasets (issue 27 §1).
    owners_create_analyst_keys: Mapped[bool] = mapped_column(default=False, server_default=false())


class ApiKey(Base):
    __tablename__ = "api_keys"
    __table_args__ = (CheckConstraint("role IN ('owner', 'analyst', 'admin')", name="role"),)

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=new_id)
    tenant_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("tenants.id"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    role: Mapped[str] = mapped_column(String(16))
    # HMAC-SHA256(secret_key, key) in hex: a leaked table does not leak usable keys.
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(default=None)
    # The key stops authenticating at expires_at (None: never) and, once rotated, at retires_at
    # (the old secret keeps working until then, so clients can switch without an outage).
    expires_at: Mapped[datetime | None] = mapped_column(default=None)
    retires_at: Mapped[datetime | None] = mapped_column(default=None)
    # The owner key that created this one over the API (None: an admin or the CLI did); such an
    # owner lists, rotates and revokes only these. No foreign key (migration 0015).
    created_by: Mapped[uuid.UUID | None] = mapped_column(default=None)


class ApiKeyDataset(Base):
    """One dataset a dataset-limited key may see; a key with no rows sees its whole tenant."""

    __tablename__ = "api_key_datasets"

    key_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("api_keys.id"), primary_key=True)
    dataset_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("datasets.id"), primary_key=True)
