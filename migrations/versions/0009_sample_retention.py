"""Derived samples expire and can be deleted (issue 24 §5).

``samples.status`` gains ``expired`` (its output deleted ``RHOSYNTH_SAMPLE_RETENTION_DAYS`` after
it finished) and ``deleted`` (its output deleted by ``DELETE /v1/samples/{id}``); the index on
(status, finished_at) serves the retention pass, which looks for succeeded samples by age.

Revision ID: 0009_sample_retention
Revises: 0008_owner_tier_queue
Create Date: 2026-12-02 01:30:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0009_sample_retention"
down_revision: str | None = "0008_owner_tier_queue"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_OLD = "status IN ('queued', 'running', 'succeeded', 'failed')"
_NEW = "status IN ('queued', 'running', 'succeeded', 'failed', 'expired', 'deleted')"


def upgrade() -> None:
    # batch: SQLite cannot alter a CHECK in place (the table is copied); PostgreSQL alters it.
    with op.batch_alter_table("samples") as batch:
        batch.drop_constraint(op.f("ck_samples_status"), type_="check")
        batch.create_check_constraint(op.f("ck_samples_status"), _NEW)
    op.create_index("ix_samples_status_finished", "samples", ["status", "finished_at"])


def downgrade() -> None:
    op.drop_index("ix_samples_status_finished", table_name="samples")
    op.execute("UPDATE samples SET status = 'failed' WHERE status IN ('expired', 'deleted')")
    with op.batch_alter_table("samples") as batch:
        batch.drop_constraint(op.f("ck_samples_status"), type_="check")
        batch.create_check_constraint(op.f("ck_samples_status"), _OLD)
