"""Jobs: an index on (tenant_id, started_at) for the fair choice of the next job to claim.

A worker that takes a message claims the queued job of the tenant with the fewest running jobs
and, among those, the one whose last job started longest ago (app/jobs/repository.py,
``claim_next``). The latest ``started_at`` of a tenant is then one index lookup instead of a scan
of the tenant's whole job history.

Revision ID: 0003_workers
Revises: 0002
Create Date: 2026-11-26 10:00:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0003_workers"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_jobs_tenant_started", "jobs", ["tenant_id", "started_at"])


def downgrade() -> None:
    op.drop_index("ix_jobs_tenant_started", table_name="jobs")
