"""The owner tier of a release's report is built by its own worker, after publication.

``jobs.owner_tier`` is the state of that build: ``pending`` (published; the owner tier is still
to be built by a reports worker), ``built`` or ``failed`` (given up after its tries); NULL for
jobs without one (not succeeded, or published before this revision). ``owner_tier_tries``
counts the builds that failed; ``owner_tier_sent_at`` is when its message was last sent, so the
recovery loop resends a lost one (issue 24 §2 and §10).

Revision ID: 0008_owner_tier_queue
Revises: 0007_dataset_warnings
Create Date: 2026-11-28 15:20:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from app.db.base import UTCDateTime

revision: str = "0008_owner_tier_queue"
down_revision: str | None = "0007_dataset_warnings"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain ADD COLUMNs (SQLite allows them in place; existing rows get NULL and 0).
    op.add_column("jobs", sa.Column("owner_tier", sa.String(length=16), nullable=True))
    op.add_column(
        "jobs",
        sa.Column("owner_tier_tries", sa.Integer(), server_default=sa.text("0"), nullable=False),
    )
    op.add_column("jobs", sa.Column("owner_tier_sent_at", UTCDateTime(), nullable=True))
    op.create_index("ix_jobs_owner_tier", "jobs", ["owner_tier"])


def downgrade() -> None:
    op.drop_index("ix_jobs_owner_tier", table_name="jobs")
    op.drop_column("jobs", "owner_tier_sent_at")
    op.drop_column("jobs", "owner_tier_tries")
    op.drop_column("jobs", "owner_tier")
