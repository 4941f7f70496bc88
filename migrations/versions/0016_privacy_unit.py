"""Privacy per person (issue 28 §1): a dataset's privacy unit and its truncation figures.

* ``datasets.privacy_unit``: the name of the column that identifies each row's person or
  account (never its values), NULL for row-level datasets;
* ``datasets.unit_max_rows``: k, the rows kept per unit (NULL exactly when the unit is);
* ``datasets.truncation``: the exact figures of what truncation removed (owner-only);
* ``datasets.truncation_release``: their DP release, charged at upload (a ``discover`` entry);
* ``jobs.unit_max_rows``: the k a job's ρ was stated for at submission (NULL: row-level).

Plain ADD COLUMNs (a batch copy of ``datasets`` on SQLite would drop a table others reference,
see 0011); the CHECK constraints are added on PostgreSQL only, as in 0011 and 0014. Existing
datasets are row-level (all NULL). The downgrade drops the columns, and refuses while any
dataset has a privacy unit (older code would release it per row).

Revision ID: 0016_privacy_unit
Revises: 0015_owner_keys
Create Date: 2026-12-04 20:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016_privacy_unit"
down_revision: str | None = "0015_owner_keys"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_CHECKS = (
    ("ck_datasets_privacy_unit_bound", "(privacy_unit IS NULL) = (unit_max_rows IS NULL)"),
    ("ck_datasets_unit_max_rows", "unit_max_rows IS NULL OR unit_max_rows >= 1"),
)


def upgrade() -> None:
    op.add_column("datasets", sa.Column("privacy_unit", sa.String(200), nullable=True))
    op.add_column("datasets", sa.Column("unit_max_rows", sa.Integer(), nullable=True))
    op.add_column("datasets", sa.Column("truncation", sa.JSON(), nullable=True))
    op.add_column("datasets", sa.Column("truncation_release", sa.JSON(), nullable=True))
    op.add_column("jobs", sa.Column("unit_max_rows", sa.Integer(), nullable=True))
    if op.get_bind().dialect.name != "sqlite":
        for name, condition in _CHECKS:
            op.create_check_constraint(op.f(name), "datasets", condition)


def downgrade() -> None:
    # Older code knows no privacy unit: it would run a per-person dataset's jobs at the row-level
    # noise, a k-fold weaker guarantee than the one its owner was given. Refuse instead.
    per_person = (
        op.get_bind()
        .execute(sa.text("SELECT count(*) FROM datasets WHERE privacy_unit IS NOT NULL"))
        .scalar_one()
    )
    if per_person:
        raise RuntimeError(
            f"{per_person} dataset(s) have a privacy unit; the code before revision "
            "0016_privacy_unit would release them per row. Delete them (or keep this revision) "
            "before downgrading."
        )
    if op.get_bind().dialect.name != "sqlite":
        for name, _ in _CHECKS:
            op.drop_constraint(op.f(name), "datasets", type_="check")
    op.drop_column("jobs", "unit_max_rows")
    for column in ("truncation_release", "truncation", "unit_max_rows", "privacy_unit"):
        op.drop_column("datasets", column)
