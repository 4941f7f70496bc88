"""A dataset: an uploaded table stored as integer codes, with the schema its owner declared."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, CheckConstraint, ForeignKey, String, text
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, new_id, utcnow


class Dataset(Base):
    __tablename__ = "datasets"
    __table_args__ = (
        CheckConstraint("n_rows > 0", name="n_rows_positive"),
        CheckConstraint("n_columns > 0", name="n_columns_positive"),
        CheckConstraint(
            "(privacy_unit IS NULL) = (unit_max_rows IS NULL)", name="privacy_unit_bound"
        ),
        CheckConstraint("unit_max_rows IS NULL OR unit_max_rows >= 1", name="unit_max_rows"),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=new_id)
    tenant_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("tenants.id"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    # The normalised declared schema (engine.tables.encoding.TableSchema.to_json()).
    schema: Mapped[dict[str, Any]] = mapped_column(JSON)
    # What the upload noticed about the domain (engine.discovery.warnings.DomainWarning.to_json()
    # of each): functions of public information only. [] for datasets created before them.
    warnings: Mapped[list[dict[str, Any]]] = mapped_column(
        JSON, default=list, server_default=text("'[]'")
    )
    n_rows: Mapped[int] = mapped_column(BigInteger)
    n_columns: Mapped[int]
    # Path of the encoded Parquet table relative to the storage root; NULL once erased.
    storage_key: Mapped[str | None] = mapped_column(String(500))
    created_by: Mapped[uuid.UUID] = mapped_column(ForeignKey("api_keys.id"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    deleted_at: Mapped[datetime | None] = mapped_column(default=None)
    deleted_by: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("api_keys.id"), default=None)
    # The privacy unit (issue 28 §1): the column that names each row's person or account, kept
    # for describing the guarantee (never its values), and k, the rows kept per unit. NULL:
    # row-level privacy. ``truncation`` holds the exact figures of what truncation removed
    # (owner-only, not DP); ``truncation_release`` their DP release (charged at upload).
    privacy_unit: Mapped[str | None] = mapped_column(String(200), default=None)
    unit_max_rows: Mapped[int | None] = mapped_column(default=None)
    truncation: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    truncation_release: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
