"""Quotas under a dataset's cap (issue 27 §2).

* ``dataset_policies``: per dataset, ``shared`` or ``reserved`` quotas and whether analyst keys
  need a quota to submit (no row: shared, not required).
* ``budget_quotas``: a share of a dataset's ρ for one key or a named group of keys, with the
  same CHECK constraints as ``budget_accounts`` (non-negative; reserved + spent ≤ granted) and a
  trigger that never lets spent ρ go down or a quota row be deleted.
* ``quota_members``: which live quota limits a key on a dataset (at most one).
* ``quota_entries``: the quotas' append-only ledger (UPDATE, DELETE and TRUNCATE refused).

Owner approval (§3): ``dataset_policies.approval_required``; jobs may be ``pending_approval``
(waiting for an owner, budget reserved), ``rejected`` or ``expired`` (never ran, reservation
released); ``jobs.decided_by``, ``decided_at`` and ``decision_reason``. On SQLite the status
CHECK is changed in place, as 0011 changes the role CHECK (a batch copy of ``jobs`` would drop a
table the ledger references). The downgrade turns pending jobs into cancelled ones, and
rejected or expired ones into cancelled ones, keeping their reason in ``error`` (their
reservations: a pending job's is released with a ``release`` ledger entry, as a cancel
would; rejected and expired ones were released when they were decided).

``down_revision`` is 0011: 0012 and 0013 are written in parallel and the merge re-points it.

Revision ID: 0014_quotas_approvals
Revises: 0013_webhooks
Create Date: 2026-12-04 16:40:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from app.db.base import UTCDateTime, utcnow
from app.db.types import Rho
from app.jobs.models import STATUS_CHECK, STATUS_CHECK_WITH_APPROVALS

revision: str = "0014_quotas_approvals"
down_revision: str | None = "0013_webhooks"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_LIVE_KEY = "removed_at IS NULL AND key_id IS NOT NULL"
_LIVE_GROUP = "removed_at IS NULL AND group_name IS NOT NULL"

_PG_GUARDS = [
    """
    CREATE FUNCTION rhosynth_quota_monotone() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF NEW.dataset_id <> OLD.dataset_id THEN
            RAISE EXCEPTION 'a quota never changes dataset' USING ERRCODE = 'restrict_violation';
        END IF;
        IF NEW.spent_rho < OLD.spent_rho THEN
            RAISE EXCEPTION 'spent budget is never refunded' USING ERRCODE = 'restrict_violation';
        END IF;
        RETURN NEW;
    END $$
    """,
    "CREATE TRIGGER quota_entries_append_only BEFORE UPDATE OR DELETE ON quota_entries "
    "FOR EACH ROW EXECUTE FUNCTION rhosynth_reject_change()",
    "CREATE TRIGGER quota_entries_no_truncate BEFORE TRUNCATE ON quota_entries "
    "FOR EACH STATEMENT EXECUTE FUNCTION rhosynth_reject_change()",
    "CREATE TRIGGER budget_quotas_monotone BEFORE UPDATE ON budget_quotas "
    "FOR EACH ROW EXECUTE FUNCTION rhosynth_quota_monotone()",
    "CREATE TRIGGER budget_quotas_no_delete BEFORE DELETE ON budget_quotas "
    "FOR EACH ROW EXECUTE FUNCTION rhosynth_reject_change()",
    "CREATE TRIGGER budget_quotas_no_truncate BEFORE TRUNCATE ON budget_quotas "
    "FOR EACH STATEMENT EXECUTE FUNCTION rhosynth_reject_change()",
]

_SQLITE_GUARDS = [
    "CREATE TRIGGER quota_entries_no_update BEFORE UPDATE ON quota_entries "
    "BEGIN SELECT RAISE(ABORT, 'UPDATE on quota_entries is not allowed: the privacy ledger is append-only'); END",
    "CREATE TRIGGER quota_entries_no_delete BEFORE DELETE ON quota_entries "
    "BEGIN SELECT RAISE(ABORT, 'DELETE on quota_entries is not allowed: the privacy ledger is append-only'); END",
    "CREATE TRIGGER budget_quotas_monotone BEFORE UPDATE ON budget_quotas "
    "WHEN NEW.spent_rho < OLD.spent_rho OR NEW.dataset_id <> OLD.dataset_id "
    "BEGIN SELECT RAISE(ABORT, 'spent quota never goes down'); END",
    "CREATE TRIGGER budget_quotas_no_delete BEFORE DELETE ON budget_quotas "
    "BEGIN SELECT RAISE(ABORT, 'DELETE on budget_quotas is not allowed'); END",
]


def _replace_status_check(old: str, new: str) -> None:
    bind = op.get_bind()
    if bind.dialect.name != "sqlite":
        op.drop_constraint(op.f("ck_jobs_status"), "jobs", type_="check")
        op.create_check_constraint(op.f("ck_jobs_status"), "jobs", new)
        return
    version = bind.exec_driver_sql("PRAGMA schema_version").scalar_one()
    bind.exec_driver_sql("PRAGMA writable_schema = ON")
    bind.execute(
        sa.text(
            "UPDATE sqlite_master SET sql = replace(sql, :old, :new) "
            "WHERE type = 'table' AND name = 'jobs'"
        ),
        {"old": old, "new": new},
    )
    # A new schema version makes every connection re-read the schema.
    bind.exec_driver_sql(f"PRAGMA schema_version = {int(version) + 1}")
    bind.exec_driver_sql("PRAGMA writable_schema = OFF")


def upgrade() -> None:
    op.add_column("jobs", sa.Column("decided_by", sa.Uuid(), nullable=True))
    op.add_column("jobs", sa.Column("decided_at", UTCDateTime(), nullable=True))
    op.add_column("jobs", sa.Column("decision_reason", sa.Text(), nullable=True))
    _replace_status_check(STATUS_CHECK, STATUS_CHECK_WITH_APPROVALS)
    op.create_table(
        "dataset_policies",
        sa.Column("dataset_id", sa.Uuid(), nullable=False),
        sa.Column("mode", sa.String(length=16), nullable=False),
        sa.Column("quota_required", sa.Boolean(), nullable=False),
        sa.Column(
            "approval_required", sa.Boolean(), server_default=sa.text("false"), nullable=False
        ),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.CheckConstraint("mode IN ('shared', 'reserved')", name=op.f("ck_dataset_policies_mode")),
        sa.ForeignKeyConstraint(
            ["dataset_id"], ["datasets.id"], name=op.f("fk_dataset_policies_dataset_id_datasets")
        ),
        sa.PrimaryKeyConstraint("dataset_id", name=op.f("pk_dataset_policies")),
    )
    op.create_table(
        "budget_quotas",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("dataset_id", sa.Uuid(), nullable=False),
        sa.Column("key_id", sa.Uuid(), nullable=True),
        sa.Column("group_name", sa.String(length=100), nullable=True),
        sa.Column("granted_rho", Rho(), nullable=False),
        sa.Column("reserved_rho", Rho(), nullable=False),
        sa.Column("spent_rho", Rho(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.Column("removed_at", UTCDateTime(), nullable=True),
        sa.CheckConstraint("granted_rho >= 0", name=op.f("ck_budget_quotas_granted_nonnegative")),
        sa.CheckConstraint("reserved_rho >= 0", name=op.f("ck_budget_quotas_reserved_nonnegative")),
        sa.CheckConstraint("spent_rho >= 0", name=op.f("ck_budget_quotas_spent_nonnegative")),
        sa.CheckConstraint(
            "reserved_rho + spent_rho <= granted_rho", name=op.f("ck_budget_quotas_within_granted")
        ),
        sa.CheckConstraint(
            "(key_id IS NULL) <> (group_name IS NULL)", name=op.f("ck_budget_quotas_key_or_group")
        ),
        sa.ForeignKeyConstraint(
            ["dataset_id"], ["datasets.id"], name=op.f("fk_budget_quotas_dataset_id_datasets")
        ),
        sa.ForeignKeyConstraint(
            ["key_id"], ["api_keys.id"], name=op.f("fk_budget_quotas_key_id_api_keys")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_budget_quotas")),
    )
    op.create_index(op.f("ix_budget_quotas_dataset_id"), "budget_quotas", ["dataset_id"])
    op.create_index(
        "uq_budget_quotas_live_key",
        "budget_quotas",
        ["dataset_id", "key_id"],
        unique=True,
        postgresql_where=sa.text(_LIVE_KEY),
        sqlite_where=sa.text(_LIVE_KEY),
    )
    op.create_index(
        "uq_budget_quotas_live_group",
        "budget_quotas",
        ["dataset_id", "group_name"],
        unique=True,
        postgresql_where=sa.text(_LIVE_GROUP),
        sqlite_where=sa.text(_LIVE_GROUP),
    )
    op.create_table(
        "quota_members",
        sa.Column("dataset_id", sa.Uuid(), nullable=False),
        sa.Column("key_id", sa.Uuid(), nullable=False),
        sa.Column("quota_id", sa.Uuid(), nullable=False),
        sa.ForeignKeyConstraint(
            ["dataset_id"], ["datasets.id"], name=op.f("fk_quota_members_dataset_id_datasets")
        ),
        sa.ForeignKeyConstraint(
            ["key_id"], ["api_keys.id"], name=op.f("fk_quota_members_key_id_api_keys")
        ),
        sa.ForeignKeyConstraint(
            ["quota_id"], ["budget_quotas.id"], name=op.f("fk_quota_members_quota_id_budget_quotas")
        ),
        sa.PrimaryKeyConstraint("dataset_id", "key_id", name=op.f("pk_quota_members")),
    )
    op.create_index(op.f("ix_quota_members_quota_id"), "quota_members", ["quota_id"])
    op.create_table(
        "quota_entries",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("quota_id", sa.Uuid(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("rho", Rho(), nullable=False),
        sa.Column("job_id", sa.Uuid(), nullable=True),
        sa.Column("actor", sa.String(length=64), nullable=False),
        sa.Column("at", UTCDateTime(), nullable=False),
        sa.CheckConstraint(
            "kind IN ('set', 'reserve', 'spend', 'release', 'remove')",
            name=op.f("ck_quota_entries_kind"),
        ),
        sa.CheckConstraint("rho >= 0", name=op.f("ck_quota_entries_rho_nonnegative")),
        sa.CheckConstraint(
            "rho > 0 OR kind IN ('set', 'remove')", name=op.f("ck_quota_entries_rho_positive")
        ),
        sa.CheckConstraint(
            "kind IN ('set', 'remove') OR job_id IS NOT NULL",
            name=op.f("ck_quota_entries_job_for_job_entries"),
        ),
        sa.ForeignKeyConstraint(
            ["quota_id"], ["budget_quotas.id"], name=op.f("fk_quota_entries_quota_id_budget_quotas")
        ),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name=op.f("fk_quota_entries_job_id_jobs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_quota_entries")),
    )
    op.create_index(op.f("ix_quota_entries_quota_id"), "quota_entries", ["quota_id"])
    op.create_index(op.f("ix_quota_entries_job_id"), "quota_entries", ["job_id"])
    dialect = op.get_bind().dialect.name
    for statement in _PG_GUARDS if dialect == "postgresql" else _SQLITE_GUARDS:
        op.execute(statement)


def downgrade() -> None:
    # Pending jobs never ran: their reservations go back, entry and account together, before
    # they become cancelled jobs.
    op.get_bind().execute(
        sa.text(
            "INSERT INTO ledger_entries (dataset_id, kind, rho, job_id, actor, at) "
            "SELECT dataset_id, 'release', rho, id, 'system', :at FROM jobs "
            "WHERE status = 'pending_approval'"
        ).bindparams(sa.bindparam("at", utcnow(), type_=UTCDateTime()))
    )
    op.execute(
        "UPDATE budget_accounts SET reserved_rho = reserved_rho - ("
        "SELECT sum(rho) FROM jobs WHERE jobs.dataset_id = budget_accounts.dataset_id "
        "AND jobs.status = 'pending_approval') "
        "WHERE dataset_id IN (SELECT dataset_id FROM jobs WHERE status = 'pending_approval')"
    )
    jobs = sa.table(
        "jobs",
        sa.column("status", sa.String()),
        sa.column("error", sa.Text()),
        sa.column("decision_reason", sa.Text()),
    )
    op.execute(
        jobs.update()
        .where(jobs.c.status.in_(("pending_approval", "rejected", "expired")))
        .values(status="cancelled", error=sa.func.coalesce(jobs.c.decision_reason, jobs.c.error))
    )
    _replace_status_check(STATUS_CHECK_WITH_APPROVALS, STATUS_CHECK)
    op.drop_column("jobs", "decision_reason")
    op.drop_column("jobs", "decided_at")
    op.drop_column("jobs", "decided_by")
    if op.get_bind().dialect.name == "postgresql":
        for trigger, table in [
            ("quota_entries_append_only", "quota_entries"),
            ("quota_entries_no_truncate", "quota_entries"),
            ("budget_quotas_monotone", "budget_quotas"),
            ("budget_quotas_no_delete", "budget_quotas"),
            ("budget_quotas_no_truncate", "budget_quotas"),
        ]:
            op.execute(f"DROP TRIGGER IF EXISTS {trigger} ON {table}")
        op.execute("DROP FUNCTION IF EXISTS rhosynth_quota_monotone()")
    else:
        for trigger in (
            "quota_entries_no_update",
            "quota_entries_no_delete",
            "budget_quotas_monotone",
            "budget_quotas_no_delete",
        ):
            op.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    op.drop_index(op.f("ix_quota_entries_job_id"), table_name="quota_entries")
    op.drop_index(op.f("ix_quota_entries_quota_id"), table_name="quota_entries")
    op.drop_table("quota_entries")
    op.drop_index(op.f("ix_quota_members_quota_id"), table_name="quota_members")
    op.drop_table("quota_members")
    op.drop_index("uq_budget_quotas_live_group", table_name="budget_quotas")
    op.drop_index("uq_budget_quotas_live_key", table_name="budget_quotas")
    op.drop_index(op.f("ix_budget_quotas_dataset_id"), table_name="budget_quotas")
    op.drop_table("budget_quotas")
    op.drop_table("dataset_policies")
