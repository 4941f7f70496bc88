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
        CheckConstraint(
            "source_kind IS NULL OR source_kind IN ('s3', 'local', 'postgres')",
            name="source_kind",
        ),
        CheckConstraint(
            "(source_kind IS NULL) = (source IS NULL) AND (source_kind IS NULL) = "
            "(source_fingerprint IS NULL) AND (source_kind IS NULL) = (source_engine IS NULL)",
            name="source_described",
        ),
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
    # Path of the encoded table relative to the storage root; NULL once erased (deleted_at set),
    # and for a registered source kept without a copy (source_kind set).
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
    # A registered source (issue 29 §1; app/sources/reading.py): its kind, where it lives (the
    # owner's metadata: never credentials), what registration measured, and the counting engine
    # its jobs use. All NULL for an upload.
    source_kind: Mapped[str | None] = mapped_column(String(20), default=None)
    # none_as_null: None is SQL NULL (the CHECKs test IS NULL), not the JSON text 'null'.
    source: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True), default=None)
    source_fingerprint: Mapped[dict[str, Any] | None] = mapped_column(
        JSON(none_as_null=True), default=None
    )
    source_engine: Mapped[str | None] = mapped_column(String(20), default=None)

    @property
    def reads_source(self) -> bool:
        """Whether jobs read the registered source itself (no stored copy)."""
        return self.source_kind is not None and self.storage_key is None

    @property
    def readable(self) -> bool:
        """Not erased: a stored table, or a registered source."""
        return self.deleted_at is None and (self.storage_key is not None or self.reads_source)
