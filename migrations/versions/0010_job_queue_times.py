"""An index on ``jobs.finished_at``, so a job's queue can be counted as it stood at a past minute
(issue 26 §3): ``app/jobs/repository.py``, ``queue_at``, reads the jobs finished after that minute
through it (the other half of that read, the live jobs, uses ``ix_jobs_status_tenant``). Whether
a job was queued or running at the minute T comes from ``created_at``, ``started_at`` (its first
claim, never moved) and ``finished_at``.

Revision ID: 0010_job_queue_times
Revises: 0009_sample_retention
Create Date: 2026-12-03 16:45:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0010_job_queue_times"
down_revision: str | None = "0009_sample_retention"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_jobs_finished_at", "jobs", ["finished_at"])


def downgrade() -> None:
    op.drop_index("ix_jobs_finished_at", table_name="jobs")
