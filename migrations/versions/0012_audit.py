"""The audit trail (issue 27 §5): ``audit_entries``, append-only and hash-chained per tenant.

Each privileged action (key changes, uploads, budget grants, job submissions and cancellations,
samples, downloads, deletions) appends one row in its own transaction (app/audit/service.py).
Triggers refuse UPDATE and DELETE of a row on both databases, and TRUNCATE on PostgreSQL, as for
the privacy ledger (0001); ``prev_hash`` and ``hash`` (rhosynth/audit.py) make a change made
around the triggers (by a superuser who drops or disables them, or by editing the SQLite file)
detectable by ``rhosynth audit verify``.

Revision ID: 0012_audit
Revises: 0011_key_management
Create Date: 2026-12-04 16:40:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from app.db.base import UTCDateTime

revision: str = "0012_audit"
down_revision: str | None = "0011_key_management"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_PG_GUARDS = [
    """
    CREATE FUNCTION rhosynth_audit_reject_change() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION '% on % is not allowed: the audit trail is append-only',
            TG_OP, TG_TABLE_NAME USING ERRCODE = 'restrict_violation';
    END $$
    """,
    "CREATE TRIGGER audit_entries_append_only BEFORE UPDATE OR DELETE ON audit_entries "
    "FOR EACH ROW EXECUTE FUNCTION rhosynth_audit_reject_change()",
    "CREATE TRIGGER audit_entries_no_truncate BEFORE TRUNCATE ON audit_entries "
    "FOR EACH STATEMENT EXECUTE FUNCTION rhosynth_audit_reject_change()",
]

_SQLITE_GUARDS = [
    "CREATE TRIGGER audit_entries_no_update BEFORE UPDATE ON audit_entries "
    "BEGIN SELECT RAISE(ABORT, 'UPDATE on audit_entries is not allowed: the audit trail is "
    "append-only'); END",
    "CREATE TRIGGER audit_entries_no_delete BEFORE DELETE ON audit_entries "
    "BEGIN SELECT RAISE(ABORT, 'DELETE on audit_entries is not allowed: the audit trail is "
    "append-only'); END",
]


def upgrade() -> None:
    op.create_table(
        "audit_entries",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("tenant_id", sa.Uuid(), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("at", UTCDateTime(), nullable=False),
        sa.Column("actor", sa.String(length=64), nullable=False),
        sa.Column("actor_name", sa.String(length=200), nullable=True),
        sa.Column("action", sa.String(length=64), nullable=False),
        sa.Column("object_type", sa.String(length=32), nullable=False),
        sa.Column("object_id", sa.String(length=64), nullable=False),
        sa.Column("request_id", sa.String(length=128), nullable=True),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.Column("prev_hash", sa.String(length=64), nullable=False),
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_audit_entries_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_entries")),
        sa.UniqueConstraint("tenant_id", "seq", name="uq_audit_entries_tenant_id_seq"),
    )
    op.create_index("ix_audit_entries_tenant_id_at", "audit_entries", ["tenant_id", "at"])
    guards = _PG_GUARDS if op.get_bind().dialect.name == "postgresql" else _SQLITE_GUARDS
    for statement in guards:
        op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS audit_entries_no_truncate ON audit_entries")
        op.execute("DROP TRIGGER IF EXISTS audit_entries_append_only ON audit_entries")
        op.execute("DROP FUNCTION IF EXISTS rhosynth_audit_reject_change()")
    else:
        op.execute("DROP TRIGGER IF EXISTS audit_entries_no_delete")
        op.execute("DROP TRIGGER IF EXISTS audit_entries_no_update")
    op.drop_index("ix_audit_entries_tenant_id_at", table_name="audit_entries")
    op.drop_table("audit_entries")
