"""Initial schema: tenants, keys, datasets, budget accounts, the append-only ledger, jobs.

Besides the tables, this revision installs the database-side guards of the privacy ledger:
ledger entries reject UPDATE/DELETE (and TRUNCATE on PostgreSQL), budget totals and spent
amounts never decrease, budget accounts are never deleted, and a job's charge is final.

Revision ID: 0001
Revises:
Create Date: 2026-11-21 08:46:01.436986
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from app.db.base import UTCDateTime
from app.db.types import Rho

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "tenants",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tenants")),
        sa.UniqueConstraint("name", name=op.f("uq_tenants_name")),
    )
    op.create_table(
        "api_keys",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("tenant_id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("key_hash", sa.String(length=64), nullable=False),
        sa.Column("prefix", sa.String(length=32), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("revoked_at", UTCDateTime(), nullable=True),
        sa.CheckConstraint("role IN ('owner', 'analyst')", name=op.f("ck_api_keys_role")),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_api_keys_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_keys")),
        sa.UniqueConstraint("key_hash", name=op.f("uq_api_keys_key_hash")),
    )
    op.create_index(op.f("ix_api_keys_tenant_id"), "api_keys", ["tenant_id"], unique=False)
    op.create_table(
        "datasets",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("tenant_id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("schema", sa.JSON(), nullable=False),
        sa.Column("n_rows", sa.BigInteger(), nullable=False),
        sa.Column("n_columns", sa.Integer(), nullable=False),
        sa.Column("storage_key", sa.String(length=500), nullable=True),
        sa.Column("created_by", sa.Uuid(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("deleted_at", UTCDateTime(), nullable=True),
        sa.Column("deleted_by", sa.Uuid(), nullable=True),
        sa.CheckConstraint("n_columns > 0", name=op.f("ck_datasets_n_columns_positive")),
        sa.CheckConstraint("n_rows > 0", name=op.f("ck_datasets_n_rows_positive")),
        sa.ForeignKeyConstraint(
            ["created_by"], ["api_keys.id"], name=op.f("fk_datasets_created_by_api_keys")
        ),
        sa.ForeignKeyConstraint(
            ["deleted_by"], ["api_keys.id"], name=op.f("fk_datasets_deleted_by_api_keys")
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_datasets_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_datasets")),
    )
    op.create_index(op.f("ix_datasets_tenant_id"), "datasets", ["tenant_id"], unique=False)
    op.create_table(
        "budget_accounts",
        sa.Column("dataset_id", sa.Uuid(), nullable=False),
        sa.Column("total_rho", Rho(), nullable=False),
        sa.Column("spent_rho", Rho(), nullable=False),
        sa.Column("reserved_rho", Rho(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.CheckConstraint(
            "reserved_rho >= 0", name=op.f("ck_budget_accounts_reserved_nonnegative")
        ),
        sa.CheckConstraint(
            "spent_rho + reserved_rho <= total_rho", name=op.f("ck_budget_accounts_within_total")
        ),
        sa.CheckConstraint("spent_rho >= 0", name=op.f("ck_budget_accounts_spent_nonnegative")),
        sa.CheckConstraint("total_rho > 0", name=op.f("ck_budget_accounts_total_positive")),
        sa.ForeignKeyConstraint(
            ["dataset_id"], ["datasets.id"], name=op.f("fk_budget_accounts_dataset_id_datasets")
        ),
        sa.PrimaryKeyConstraint("dataset_id", name=op.f("pk_budget_accounts")),
    )
    op.create_table(
        "jobs",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("tenant_id", sa.Uuid(), nullable=False),
        sa.Column("dataset_id", sa.Uuid(), nullable=False),
        sa.Column("method", sa.String(length=64), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("rho", Rho(), nullable=False),
        sa.Column("epsilon", sa.String(length=64), nullable=True),
        sa.Column("delta", sa.String(length=64), nullable=True),
        sa.Column("rows", sa.BigInteger(), nullable=True),
        sa.Column("seed", sa.BigInteger(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("progress_fraction", sa.Double(), nullable=False),
        sa.Column("progress_stage", sa.String(length=64), nullable=False),
        sa.Column("lease_expires_at", UTCDateTime(), nullable=True),
        sa.Column("enqueued_at", UTCDateTime(), nullable=True),
        sa.Column("submitted_by", sa.Uuid(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("charged_at", UTCDateTime(), nullable=True),
        sa.Column("started_at", UTCDateTime(), nullable=True),
        sa.Column("finished_at", UTCDateTime(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("output_key", sa.String(length=500), nullable=True),
        sa.Column("output_rows", sa.BigInteger(), nullable=True),
        sa.CheckConstraint(
            "status <> 'succeeded' OR output_key IS NOT NULL",
            name=op.f("ck_jobs_output_if_succeeded"),
        ),
        sa.CheckConstraint(
            "status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')",
            name=op.f("ck_jobs_status"),
        ),
        sa.CheckConstraint("attempt >= 0", name=op.f("ck_jobs_attempt_nonnegative")),
        sa.CheckConstraint(
            "progress_fraction >= 0 AND progress_fraction <= 1", name=op.f("ck_jobs_progress")
        ),
        sa.CheckConstraint("rho > 0", name=op.f("ck_jobs_rho_positive")),
        sa.CheckConstraint("rows IS NULL OR rows >= 1", name=op.f("ck_jobs_rows_positive")),
        sa.CheckConstraint(
            "started_at IS NULL OR charged_at IS NOT NULL", name=op.f("ck_jobs_charged_if_started")
        ),
        sa.ForeignKeyConstraint(
            ["dataset_id"], ["datasets.id"], name=op.f("fk_jobs_dataset_id_datasets")
        ),
        sa.ForeignKeyConstraint(
            ["submitted_by"], ["api_keys.id"], name=op.f("fk_jobs_submitted_by_api_keys")
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_jobs_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
    )
    op.create_index(op.f("ix_jobs_dataset_id"), "jobs", ["dataset_id"], unique=False)
    op.create_index("ix_jobs_status_lease", "jobs", ["status", "lease_expires_at"], unique=False)
    op.create_index(op.f("ix_jobs_tenant_id"), "jobs", ["tenant_id"], unique=False)
    op.create_table(
        "idempotency_keys",
        sa.Column("tenant_id", sa.Uuid(), nullable=False),
        sa.Column("key", sa.String(length=255), nullable=False),
        sa.Column("request_hash", sa.String(length=64), nullable=False),
        sa.Column("job_id", sa.Uuid(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobs.id"],
            name="fk_idempotency_keys_job_id_jobs",
            initially="DEFERRED",
            deferrable=True,
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_idempotency_keys_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("tenant_id", "key", name=op.f("pk_idempotency_keys")),
    )
    op.create_table(
        "ledger_entries",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("dataset_id", sa.Uuid(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("rho", Rho(), nullable=False),
        sa.Column("job_id", sa.Uuid(), nullable=True),
        sa.Column("actor", sa.String(length=64), nullable=False),
        sa.Column("at", UTCDateTime(), nullable=False),
        sa.CheckConstraint(
            "kind = 'grant' OR job_id IS NOT NULL",
            name=op.f("ck_ledger_entries_job_for_job_entries"),
        ),
        sa.CheckConstraint(
            "kind IN ('grant', 'reserve', 'spend', 'release')", name=op.f("ck_ledger_entries_kind")
        ),
        sa.CheckConstraint("rho > 0", name=op.f("ck_ledger_entries_rho_positive")),
        sa.ForeignKeyConstraint(
            ["dataset_id"], ["datasets.id"], name=op.f("fk_ledger_entries_dataset_id_datasets")
        ),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_ledger_entries_job_id_jobs")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ledger_entries")),
    )
    op.create_index(
        op.f("ix_ledger_entries_dataset_id"), "ledger_entries", ["dataset_id"], unique=False
    )
    op.create_index(op.f("ix_ledger_entries_job_id"), "ledger_entries", ["job_id"], unique=False)
    _create_guards()


def downgrade() -> None:
    _drop_guards()
    op.drop_index(op.f("ix_ledger_entries_job_id"), table_name="ledger_entries")
    op.drop_index(op.f("ix_ledger_entries_dataset_id"), table_name="ledger_entries")
    op.drop_table("ledger_entries")
    op.drop_table("idempotency_keys")
    op.drop_index(op.f("ix_jobs_tenant_id"), table_name="jobs")
    op.drop_index("ix_jobs_status_lease", table_name="jobs")
    op.drop_index(op.f("ix_jobs_dataset_id"), table_name="jobs")
    op.drop_table("jobs")
    op.drop_table("budget_accounts")
    op.drop_index(op.f("ix_datasets_tenant_id"), table_name="datasets")
    op.drop_table("datasets")
    op.drop_index(op.f("ix_api_keys_tenant_id"), table_name="api_keys")
    op.drop_table("api_keys")
    op.drop_table("tenants")


_PG_GUARDS = [
    """
    CREATE FUNCTION rhosynth_reject_change() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION '% on % is not allowed: the privacy ledger is append-only',
            TG_OP, TG_TABLE_NAME USING ERRCODE = 'restrict_violation';
    END $$
    """,
    """
    CREATE FUNCTION rhosynth_budget_monotone() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF NEW.dataset_id <> OLD.dataset_id THEN
            RAISE EXCEPTION 'a budget account never changes dataset' USING ERRCODE = 'restrict_violation';
        END IF;
        IF NEW.total_rho < OLD.total_rho THEN
            RAISE EXCEPTION 'budget totals never go down' USING ERRCODE = 'restrict_violation';
        END IF;
        IF NEW.spent_rho < OLD.spent_rho THEN
            RAISE EXCEPTION 'spent budget is never refunded' USING ERRCODE = 'restrict_violation';
        END IF;
        RETURN NEW;
    END $$
    """,
    """
    CREATE FUNCTION rhosynth_job_charge_final() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF OLD.charged_at IS NOT NULL AND NEW.charged_at IS DISTINCT FROM OLD.charged_at THEN
            RAISE EXCEPTION 'a job is charged once and stays charged' USING ERRCODE = 'restrict_violation';
        END IF;
        IF NEW.rho <> OLD.rho OR NEW.dataset_id <> OLD.dataset_id THEN
            RAISE EXCEPTION 'a job''s charge and dataset are fixed at submission' USING ERRCODE = 'restrict_violation';
        END IF;
        RETURN NEW;
    END $$
    """,
    "CREATE TRIGGER ledger_entries_append_only BEFORE UPDATE OR DELETE ON ledger_entries "
    "FOR EACH ROW EXECUTE FUNCTION rhosynth_reject_change()",
    "CREATE TRIGGER ledger_entries_no_truncate BEFORE TRUNCATE ON ledger_entries "
    "FOR EACH STATEMENT EXECUTE FUNCTION rhosynth_reject_change()",
    "CREATE TRIGGER budget_accounts_monotone BEFORE UPDATE ON budget_accounts "
    "FOR EACH ROW EXECUTE FUNCTION rhosynth_budget_monotone()",
    "CREATE TRIGGER budget_accounts_no_delete BEFORE DELETE ON budget_accounts "
    "FOR EACH ROW EXECUTE FUNCTION rhosynth_reject_change()",
    "CREATE TRIGGER budget_accounts_no_truncate BEFORE TRUNCATE ON budget_accounts "
    "FOR EACH STATEMENT EXECUTE FUNCTION rhosynth_reject_change()",
    "CREATE TRIGGER jobs_charge_final BEFORE UPDATE ON jobs "
    "FOR EACH ROW EXECUTE FUNCTION rhosynth_job_charge_final()",
]

_SQLITE_GUARDS = [
    "CREATE TRIGGER ledger_entries_no_update BEFORE UPDATE ON ledger_entries "
    "BEGIN SELECT RAISE(ABORT, 'UPDATE on ledger_entries is not allowed: the privacy ledger is append-only'); END",
    "CREATE TRIGGER ledger_entries_no_delete BEFORE DELETE ON ledger_entries "
    "BEGIN SELECT RAISE(ABORT, 'DELETE on ledger_entries is not allowed: the privacy ledger is append-only'); END",
    "CREATE TRIGGER budget_accounts_monotone BEFORE UPDATE ON budget_accounts "
    "WHEN NEW.total_rho < OLD.total_rho OR NEW.spent_rho < OLD.spent_rho OR NEW.dataset_id <> OLD.dataset_id "
    "BEGIN SELECT RAISE(ABORT, 'budget totals and spent amounts never go down'); END",
    "CREATE TRIGGER budget_accounts_no_delete BEFORE DELETE ON budget_accounts "
    "BEGIN SELECT RAISE(ABORT, 'DELETE on budget_accounts is not allowed'); END",
    "CREATE TRIGGER jobs_charge_final BEFORE UPDATE ON jobs "
    "WHEN (OLD.charged_at IS NOT NULL AND (NEW.charged_at IS NULL OR NEW.charged_at <> OLD.charged_at)) "
    "OR NEW.rho <> OLD.rho OR NEW.dataset_id <> OLD.dataset_id "
    "BEGIN SELECT RAISE(ABORT, 'a job is charged once and its charge is fixed'); END",
]


def _create_guards() -> None:
    dialect = op.get_bind().dialect.name
    statements = (
        _PG_GUARDS if dialect == "postgresql" else _SQLITE_GUARDS if dialect == "sqlite" else None
    )
    if statements is None:
        raise RuntimeError(f"rhosynth supports PostgreSQL and SQLite, not {dialect}")
    for statement in statements:
        op.execute(statement)


def _drop_guards() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "postgresql":
        for trigger, table in [
            ("ledger_entries_append_only", "ledger_entries"),
            ("ledger_entries_no_truncate", "ledger_entries"),
            ("budget_accounts_monotone", "budget_accounts"),
            ("budget_accounts_no_delete", "budget_accounts"),
            ("budget_accounts_no_truncate", "budget_accounts"),
            ("jobs_charge_final", "jobs"),
        ]:
            op.execute(f"DROP TRIGGER IF EXISTS {trigger} ON {table}")
        for function in (
            "rhosynth_reject_change",
            "rhosynth_budget_monotone",
            "rhosynth_job_charge_final",
        ):
            op.execute(f"DROP FUNCTION IF EXISTS {function}()")
    else:
        for trigger in (
            "ledger_entries_no_update",
            "ledger_entries_no_delete",
            "budget_accounts_monotone",
            "budget_accounts_no_delete",
            "jobs_charge_final",
        ):
            op.execute(f"DROP TRIGGER IF EXISTS {trigger}")
