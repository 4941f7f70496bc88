"""The ledger's δ dimension and the ``discover`` entry.

Discovery at upload (learning part of a dataset's domain with DP) is (ρ, δ)-approximate zCDP, so
a budget account gains ``total_delta`` (granted; below 1) and ``spent_delta`` (spent by discovery),
and the ledger gains a ``delta`` column, the kind ``discover`` (ρ ≥ 0 and δ ≥ 0, not both 0, no
job) and a nullable ``detail`` JSON (the mechanism and its per-column costs). δ moves only in
``grant`` and ``discover`` entries. The triggers that keep totals and spent amounts from going
down now cover ``total_delta`` and ``spent_delta`` too.

On SQLite, changing a CHECK constraint rebuilds the table (batch mode), which drops the table's
triggers; they are created again here, so the ledger stays append-only. On SQLite δ is stored
in integer units of 1e-18 (``app.db.types.Delta``), so the bound ``total_delta < 1`` is written in
units there.

Downgrade drops the δ columns and restores the old constraints; it fails (changing nothing) if
the ledger holds a ``discover`` entry, since the old constraints reject it: ledger history is
never dropped silently.

Revision ID: 0004_ledger_delta
Revises: 0003_workers
Create Date: 2026-11-26 02:10:00.000000
"""

from collections.abc import Sequence
from decimal import Decimal

import sqlalchemy as sa
from alembic import op

from app.db.types import Delta, delta_sql_constant

revision: str = "0004_ledger_delta"
down_revision: str | None = "0003_workers"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


_NEW_LEDGER_CHECKS = {
    "kind": "kind IN ('grant', 'reserve', 'spend', 'release', 'discover')",
    "rho_positive": "rho > 0 OR kind = 'discover'",
    "rho_nonnegative": "rho >= 0",
    "delta_nonnegative": "delta >= 0",
    "discover_charges": "kind <> 'discover' OR rho > 0 OR delta > 0",
    "delta_kinds": "delta = 0 OR kind IN ('grant', 'discover')",
    "job_for_job_entries": "kind IN ('grant', 'discover') OR job_id IS NOT NULL",
    "discover_without_job": "kind <> 'discover' OR job_id IS NULL",
}
_OLD_LEDGER_CHECKS = {
    "kind": "kind IN ('grant', 'reserve', 'spend', 'release')",
    "rho_positive": "rho > 0",
    "job_for_job_entries": "kind = 'grant' OR job_id IS NOT NULL",
}


def _account_checks(dialect: str) -> dict[str, str]:
    return {
        "total_delta_nonnegative": "total_delta >= 0",
        "spent_delta_nonnegative": "spent_delta >= 0",
        "delta_within_total": "spent_delta <= total_delta",
        "total_delta_below_one": f"total_delta < {delta_sql_constant(Decimal(1), dialect)}",
    }


def _dialect() -> str:
    name = op.get_bind().dialect.name
    if name not in ("postgresql", "sqlite"):
        raise RuntimeError(f"rhosynth supports PostgreSQL and SQLite, not {name}")
    return name


def upgrade() -> None:
    dialect = _dialect()
    with op.batch_alter_table("budget_accounts") as batch:
        batch.add_column(
            sa.Column("total_delta", Delta(), server_default=sa.text("0"), nullable=False)
        )
        batch.add_column(
            sa.Column("spent_delta", Delta(), server_default=sa.text("0"), nullable=False)
        )
        for name, condition in _account_checks(dialect).items():
            batch.create_check_constraint(op.f(f"ck_budget_accounts_{name}"), condition)
    with op.batch_alter_table("ledger_entries") as batch:
        batch.add_column(sa.Column("delta", Delta(), server_default=sa.text("0"), nullable=False))
        batch.add_column(sa.Column("detail", sa.JSON(), nullable=True))
        for name in _OLD_LEDGER_CHECKS:
            batch.drop_constraint(op.f(f"ck_ledger_entries_{name}"), type_="check")
        for name, condition in _NEW_LEDGER_CHECKS.items():
            batch.create_check_constraint(op.f(f"ck_ledger_entries_{name}"), condition)
    if dialect == "postgresql":
        op.execute(_pg_monotone(with_delta=True))
    else:
        _replace_sqlite_guards(_SQLITE_MONOTONE_WITH_DELTA)


def downgrade() -> None:
    dialect = _dialect()
    if dialect == "postgresql":
        op.execute(_pg_monotone(with_delta=False))
    with op.batch_alter_table("ledger_entries") as batch:
        for name in _NEW_LEDGER_CHECKS:
            batch.drop_constraint(op.f(f"ck_ledger_entries_{name}"), type_="check")
        for name, condition in _OLD_LEDGER_CHECKS.items():
            batch.create_check_constraint(op.f(f"ck_ledger_entries_{name}"), condition)
        batch.drop_column("detail")
        batch.drop_column("delta")
    with op.batch_alter_table("budget_accounts") as batch:
        for name in _account_checks(dialect):
            batch.drop_constraint(op.f(f"ck_budget_accounts_{name}"), type_="check")
        batch.drop_column("spent_delta")
        batch.drop_column("total_delta")
    if dialect == "sqlite":
        _replace_sqlite_guards(_SQLITE_MONOTONE_RHO_ONLY)


# PostgreSQL: ALTER TABLE keeps the triggers; only the monotone function changes (its text as in
# 0001, with the δ comparisons added on upgrade and removed again on downgrade).
def _pg_monotone(with_delta: bool) -> str:
    total = " OR NEW.total_delta < OLD.total_delta" if with_delta else ""
    spent = " OR NEW.spent_delta < OLD.spent_delta" if with_delta else ""
    return f"""
CREATE OR REPLACE FUNCTION rhosynth_budget_monotone() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.dataset_id <> OLD.dataset_id THEN
        RAISE EXCEPTION 'a budget account never changes dataset' USING ERRCODE = 'restrict_violation';
    END IF;
    IF NEW.total_rho < OLD.total_rho{total} THEN
        RAISE EXCEPTION 'budget totals never go down' USING ERRCODE = 'restrict_violation';
    END IF;
    IF NEW.spent_rho < OLD.spent_rho{spent} THEN
        RAISE EXCEPTION 'spent budget is never refunded' USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN NEW;
END $$
"""


# SQLite: the batch rebuild of a table drops its triggers, so all four triggers of the two
# rebuilt tables are created again (the same text as 0001, the monotone one extended to δ).
_SQLITE_MONOTONE_WITH_DELTA = (
    "CREATE TRIGGER budget_accounts_monotone BEFORE UPDATE ON budget_accounts "
    "WHEN NEW.total_rho < OLD.total_rho OR NEW.spent_rho < OLD.spent_rho "
    "OR NEW.total_delta < OLD.total_delta OR NEW.spent_delta < OLD.spent_delta "
    "OR NEW.dataset_id <> OLD.dataset_id "
    "BEGIN SELECT RAISE(ABORT, 'budget totals and spent amounts never go down'); END"
)
_SQLITE_MONOTONE_RHO_ONLY = (
    "CREATE TRIGGER budget_accounts_monotone BEFORE UPDATE ON budget_accounts "
    "WHEN NEW.total_rho < OLD.total_rho OR NEW.spent_rho < OLD.spent_rho OR NEW.dataset_id <> OLD.dataset_id "
    "BEGIN SELECT RAISE(ABORT, 'budget totals and spent amounts never go down'); END"
)
_SQLITE_OTHER_GUARDS = {
    "ledger_entries_no_update": "CREATE TRIGGER ledger_entries_no_update BEFORE UPDATE ON ledger_entries "
    "BEGIN SELECT RAISE(ABORT, 'UPDATE on ledger_entries is not allowed: the privacy ledger is append-only'); END",
    "ledger_entries_no_delete": "CREATE TRIGGER ledger_entries_no_delete BEFORE DELETE ON ledger_entries "
    "BEGIN SELECT RAISE(ABORT, 'DELETE on ledger_entries is not allowed: the privacy ledger is append-only'); END",
    "budget_accounts_no_delete": "CREATE TRIGGER budget_accounts_no_delete BEFORE DELETE ON budget_accounts "
    "BEGIN SELECT RAISE(ABORT, 'DELETE on budget_accounts is not allowed'); END",
}


def _replace_sqlite_guards(monotone: str) -> None:
    for trigger in (*_SQLITE_OTHER_GUARDS, "budget_accounts_monotone"):
        op.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    for statement in (*_SQLITE_OTHER_GUARDS.values(), monotone):
        op.execute(statement)
