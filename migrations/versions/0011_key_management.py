"""Keys over the API (issue 27 §1): an ``admin`` role, key expiry, rotation and dataset-limited keys.

* ``api_keys.role`` may be ``admin`` (key management only; see app/auth/service.py).
* ``api_keys.expires_at``: the key stops authenticating at that instant (NULL: never).
* ``api_keys.retires_at``: set on the old key when it is rotated; its secret stays valid until
  then, so clients can switch to the new key without an outage.
* ``api_key_datasets``: the datasets a dataset-limited key may see (no rows: every dataset of
  its tenant).

On SQLite the CHECK constraint is changed in place in ``sqlite_schema`` (the procedure SQLite's
documentation gives for constraint changes that existing rows satisfy, "Making Other Kinds Of
Table Schema Changes"): a batch copy of ``api_keys`` would drop a table that datasets, jobs,
samples and console sessions reference, which SQLite's enforced foreign keys refuse inside the
migration's transaction.

The downgrade cannot keep admin keys (the old CHECK refuses them): they are revoked and
recorded as analyst keys (the rows stay: ledgers and sessions may name them). Dataset-limited
keys and keys with an expiry or a rotation's retirement are revoked too: the old schema would
let them see every dataset, or work again, or for ever.

Revision ID: 0011_key_management
Revises: 0010_job_queue_times
Create Date: 2026-12-04 16:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from app.db.base import UTCDateTime, utcnow

revision: str = "0011_key_management"
down_revision: str | None = "0010_job_queue_times"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_OLD = "role IN ('owner', 'analyst')"
_NEW = "role IN ('owner', 'analyst', 'admin')"


def _replace_role_check(old: str, new: str) -> None:
    bind = op.get_bind()
    if bind.dialect.name != "sqlite":
        op.drop_constraint(op.f("ck_api_keys_role"), "api_keys", type_="check")
        op.create_check_constraint(op.f("ck_api_keys_role"), "api_keys", new)
        return
    version = bind.exec_driver_sql("PRAGMA schema_version").scalar_one()
    bind.exec_driver_sql("PRAGMA writable_schema = ON")
    bind.execute(
        sa.text(
            "UPDATE sqlite_master SET sql = replace(sql, :old, :new) "
            "WHERE type = 'table' AND name = 'api_keys'"
        ),
        {"old": old, "new": new},
    )
    # A new schema version makes every connection re-read the schema.
    bind.exec_driver_sql(f"PRAGMA schema_version = {int(version) + 1}")
    bind.exec_driver_sql("PRAGMA writable_schema = OFF")


def upgrade() -> None:
    op.add_column("api_keys", sa.Column("expires_at", UTCDateTime(), nullable=True))
    op.add_column("api_keys", sa.Column("retires_at", UTCDateTime(), nullable=True))
    _replace_role_check(_OLD, _NEW)
    op.create_table(
        "api_key_datasets",
        sa.Column("key_id", sa.Uuid(), nullable=False),
        sa.Column("dataset_id", sa.Uuid(), nullable=False),
        sa.ForeignKeyConstraint(
            ["key_id"], ["api_keys.id"], name=op.f("fk_api_key_datasets_key_id_api_keys")
        ),
        sa.ForeignKeyConstraint(
            ["dataset_id"], ["datasets.id"], name=op.f("fk_api_key_datasets_dataset_id_datasets")
        ),
        sa.PrimaryKeyConstraint("key_id", "dataset_id", name=op.f("pk_api_key_datasets")),
    )


def downgrade() -> None:
    api_keys = sa.table(
        "api_keys",
        sa.column("id", sa.Uuid()),
        sa.column("role", sa.String()),
        sa.column("revoked_at", UTCDateTime()),
        sa.column("expires_at", UTCDateTime()),
        sa.column("retires_at", UTCDateTime()),
    )
    limits = sa.table("api_key_datasets", sa.column("key_id", sa.Uuid()))
    # Revoked, not kept: a key the old schema cannot describe. Kept, a dataset-limited key would
    # see every dataset of its tenant, and an expired key or one retired by a rotation would
    # work again (one that expires later would never stop).
    op.execute(
        api_keys.update()
        .where(
            api_keys.c.revoked_at.is_(None),
            sa.or_(
                api_keys.c.role == "admin",
                api_keys.c.expires_at.is_not(None),
                api_keys.c.retires_at.is_not(None),
                api_keys.c.id.in_(sa.select(limits.c.key_id)),
            ),
        )
        .values(revoked_at=utcnow())
    )
    op.drop_table("api_key_datasets")
    op.execute(api_keys.update().where(api_keys.c.role == "admin").values(role="analyst"))
    _replace_role_check(_NEW, _OLD)
    # Plain DROP COLUMNs (SQLite ≥ 3.35 drops a column without constraints in place).
    op.drop_column("api_keys", "retires_at")
    op.drop_column("api_keys", "expires_at")
