"""Release artefacts and free re-samples.

A succeeded job publishes, with its output, the names of the artefacts its attempt wrote next to it
(``jobs.artefacts``: the release record, the fitted model, the release-tier and owner-tier
reports, the noisy measurements as tables). They live under ``outputs/<job>/attempt-<n>/``.

``samples`` holds the derived samples drawn from a succeeded job's fitted model: post-processing
of a published release, so a sample has no ρ, no reservation and no ledger entry; its rows are a
new output. Its lifecycle is the job's without the budget: queued, running (under a lease, and a
lost attempt is simply retried, since re-sampling releases nothing new), then succeeded or failed.

Revision ID: 0005_release_artefacts
Revises: 0004_ledger_delta
Create Date: 2026-11-26 14:10:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from app.db.base import UTCDateTime

revision: str = "0005_release_artefacts"
down_revision: str | None = "0004_ledger_delta"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A plain ADD COLUMN, not batch mode: rebuilding the table on SQLite would drop its guard
    # trigger (jobs_charge_final).
    op.add_column("jobs", sa.Column("artefacts", sa.JSON(), nullable=True))
    op.create_table(
        "samples",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("tenant_id", sa.Uuid(), nullable=False),
        sa.Column("dataset_id", sa.Uuid(), nullable=False),
        sa.Column("job_id", sa.Uuid(), nullable=False),
        sa.Column("rows", sa.BigInteger(), nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("lease_expires_at", UTCDateTime(), nullable=True),
        sa.Column("enqueued_at", UTCDateTime(), nullable=True),
        sa.Column("requested_by", sa.Uuid(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("started_at", UTCDateTime(), nullable=True),
        sa.Column("finished_at", UTCDateTime(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("output_key", sa.String(length=500), nullable=True),
        sa.Column("output_rows", sa.BigInteger(), nullable=True),
        sa.CheckConstraint(
            "status IN ('queued', 'running', 'succeeded', 'failed')",
            name=op.f("ck_samples_status"),
        ),
        sa.CheckConstraint("rows >= 1", name=op.f("ck_samples_rows_positive")),
        sa.CheckConstraint("attempt >= 0", name=op.f("ck_samples_attempt_nonnegative")),
        sa.CheckConstraint(
            "status <> 'succeeded' OR output_key IS NOT NULL",
            name=op.f("ck_samples_output_if_succeeded"),
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_samples_tenant_id_tenants")
        ),
        sa.ForeignKeyConstraint(
            ["dataset_id"], ["datasets.id"], name=op.f("fk_samples_dataset_id_datasets")
        ),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name=op.f("fk_samples_job_id_jobs")),
        sa.ForeignKeyConstraint(
            ["requested_by"], ["api_keys.id"], name=op.f("fk_samples_requested_by_api_keys")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_samples")),
    )
    op.create_index(op.f("ix_samples_dataset_id"), "samples", ["dataset_id"], unique=False)
    op.create_index(op.f("ix_samples_job_id"), "samples", ["job_id"], unique=False)
    op.create_index(op.f("ix_samples_tenant_id"), "samples", ["tenant_id"], unique=False)
    op.create_index(
        "ix_samples_status_lease", "samples", ["status", "lease_expires_at"], unique=False
    )


def downgrade() -> None:
    op.drop_index("ix_samples_status_lease", table_name="samples")
    op.drop_index(op.f("ix_samples_tenant_id"), table_name="samples")
    op.drop_index(op.f("ix_samples_job_id"), table_name="samples")
    op.drop_index(op.f("ix_samples_dataset_id"), table_name="samples")
    op.drop_table("samples")
    op.drop_column("jobs", "artefacts")  # SQLite ≥ 3.35 drops a column in place
