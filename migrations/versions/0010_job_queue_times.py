"""When a job last left and last re-entered the queue, so its queue can be counted as it stood at
a past minute (issue 26 §3).

``jobs.claimed_at`` is when a worker last claimed the job out of the queue (a re-claim of a lost
running job does not move it); ``jobs.requeued_at`` is when it was last put back in the queue
after its worker was lost (NULL: never; it has been queued since ``created_at`` until claimed).
With ``created_at``, ``finished_at`` and ``started_at`` they say which jobs were queued, and which
running, at a given minute T (``app/jobs/repository.py``, ``queue_at``). The index on
``finished_at`` serves that read's "finished after T" half (the other half, live jobs, uses
``ix_jobs_status_tenant``).

Existing rows: ``claimed_at`` is their ``started_at`` (the first claim) unless they are queued
now; ``requeued_at`` stays NULL. A job requeued before this revision therefore counts as queued
since its creation, which is only wrong for minutes before the upgrade.

Revision ID: 0010_job_queue_times
Revises: 0009_sample_retention
Create Date: 2026-12-03 16:45:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from app.db.base import UTCDateTime

revision: str = "0010_job_queue_times"
down_revision: str | None = "0009_sample_retention"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain ADD COLUMNs (SQLite allows them in place; existing rows get NULL).
    op.add_column("jobs", sa.Column("claimed_at", UTCDateTime(), nullable=True))
    op.add_column("jobs", sa.Column("requeued_at", UTCDateTime(), nullable=True))
    op.execute("UPDATE jobs SET claimed_at = started_at WHERE status <> 'queued'")
    op.create_index("ix_jobs_finished_at", "jobs", ["finished_at"])


def downgrade() -> None:
    op.drop_index("ix_jobs_finished_at", table_name="jobs")
    op.drop_column("jobs", "requeued_at")
    op.drop_column("jobs", "claimed_at")
