"""Jobs: owner-only detailed progress, a per-attempt deadline, and an index for fair claiming.

``progress_fraction`` / ``progress_stage`` become what every key of the tenant sees: a function
of public information only (the method's public schedule). The noise-dependent progress of the
engine moves to ``detail_fraction`` / ``detail_stage``, shown to owner keys only.
``deadline_at`` is the wall-clock limit of the running attempt (set at each claim); a lost
attempt past it ends ``failed`` instead of being retried. The (status, tenant_id) index serves
the fair choice of the next job to claim.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-25 17:10:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from app.db.base import UTCDateTime

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain ADD COLUMN, never batch mode: on SQLite a batch rebuild of the table would drop the
    # jobs triggers that keep a job's charge final.
    op.add_column("jobs", sa.Column("detail_fraction", sa.Float(), nullable=True))
    op.add_column("jobs", sa.Column("detail_stage", sa.String(length=64), nullable=True))
    op.add_column("jobs", sa.Column("deadline_at", UTCDateTime(), nullable=True))
    op.create_index("ix_jobs_status_tenant", "jobs", ["status", "tenant_id"])


def downgrade() -> None:
    op.drop_index("ix_jobs_status_tenant", table_name="jobs")
    op.drop_column("jobs", "deadline_at")
    op.drop_column("jobs", "detail_stage")
    op.drop_column("jobs", "detail_fraction")
