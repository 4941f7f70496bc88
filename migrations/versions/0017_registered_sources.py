"""Registered sources (issue 29 §1): a dataset read where it lives instead of uploaded.

* ``datasets.source_kind``: ``s3``, ``local`` or ``postgres``; NULL for an upload;
* ``datasets.source``: where it lives (uri, or connection and table or query; never credentials);
* ``datasets.source_fingerprint``: what registration measured (per file: key, size, modification
  time, ETag; PostgreSQL: row count and checksum), checked again before each job reads it;
* ``datasets.source_engine``: the counting engine jobs use on it (``duckdb`` or ``spark``),
  chosen by the operator at registration.

``storage_key`` stays NULL for a registered dataset without a copy: a NULL ``storage_key`` no
longer means "erased" by itself; ``deleted_at`` says that, and the code asks
``Dataset.readable`` / ``Dataset.reads_source`` (app/datasets/models.py). No CHECK ties
``storage_key`` to the source: records without either exist in tests and are harmless (a job on
one is cancelled as erased). Plain ADD COLUMNs; CHECK constraints on PostgreSQL only, as in 0016.
The downgrade refuses while a registered dataset without a copy exists (older code would take it
for an erased one).

Revision ID: 0017_registered_sources
Revises: 0016_privacy_unit
Create Date: 2026-12-04 23:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017_registered_sources"
down_revision: str | None = "0016_privacy_unit"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_CHECKS = (
    (
        "ck_datasets_source_kind",
        "source_kind IS NULL OR source_kind IN ('s3', 'local', 'postgres')",
    ),
    (
        "ck_datasets_source_described",
        "(source_kind IS NULL) = (source IS NULL) AND (source_kind IS NULL) = "
        "(source_fingerprint IS NULL) AND (source_kind IS NULL) = (source_engine IS NULL)",
    ),
)


def upgrade() -> None:
    op.add_column("datasets", sa.Column("source_kind", sa.String(20), nullable=True))
    op.add_column("datasets", sa.Column("source", sa.JSON(), nullable=True))
    op.add_column("datasets", sa.Column("source_fingerprint", sa.JSON(), nullable=True))
    op.add_column("datasets", sa.Column("source_engine", sa.String(20), nullable=True))
    if op.get_bind().dialect.name != "sqlite":
        for name, condition in _CHECKS:
            op.create_check_constraint(op.f(name), "datasets", condition)


def downgrade() -> None:
    registered = (
        op.get_bind()
        .execute(
            sa.text(
                "SELECT count(*) FROM datasets WHERE source_kind IS NOT NULL "
                "AND storage_key IS NULL AND deleted_at IS NULL"
            )
        )
        .scalar_one()
    )
    if registered:
        raise RuntimeError(
            f"{registered} registered dataset(s) have no stored copy; the code before revision "
            "0017_registered_sources cannot read them. Delete them before downgrading."
        )
    if op.get_bind().dialect.name != "sqlite":
        for name, _condition in _CHECKS:
            op.drop_constraint(op.f(name), "datasets", type_="check")
    for column in ("source_engine", "source_fingerprint", "source", "source_kind"):
        op.drop_column("datasets", column)
