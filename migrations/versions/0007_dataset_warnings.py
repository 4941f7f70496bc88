"""Dataset warnings: what the upload noticed about the dataset's domain.

``datasets.warnings`` holds the list of ``{"code", "column", "message"}`` that
``engine.discovery.warnings.domain_warnings`` computed at upload, from public information only
(the resolved schema's declared or DP-learned edges and categories, which columns were
discovered, the budgets). Datasets created before this revision get ``[]``.

Revision ID: 0007_dataset_warnings
Revises: 0006_console_sessions
Create Date: 2026-11-28 09:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007_dataset_warnings"
down_revision: str | None = "0006_console_sessions"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A plain ADD COLUMN with a constant default (existing rows get []), not batch mode: SQLite
    # allows it in place, and rebuilding the table is not needed.
    op.add_column(
        "datasets",
        sa.Column("warnings", sa.JSON(), server_default=sa.text("'[]'"), nullable=False),
    )


def downgrade() -> None:
    op.drop_column("datasets", "warnings")  # SQLite ≥ 3.35 drops a column in place
