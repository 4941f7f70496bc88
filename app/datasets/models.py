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
