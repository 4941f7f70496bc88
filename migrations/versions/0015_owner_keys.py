"""Owner-created analyst keys (issue 27 §1: "Owners may create analyst keys for their own
datasets if the admin allows it").

* ``tenants.owners_create_analyst_keys``: the admin's switch (false by default).
* ``api_keys.created_by``: the key that created this one over the API when that was an owner
  key (NULL otherwise): an owner manages only the keys it made. A plain column, no foreign key:
  SQLite cannot add a constrained column in place, and a batch copy of ``api_keys`` would drop
  a table others reference (see 0011).

The downgrade drops both; keys owners created stay (dataset-limited analyst keys, which the old
schema describes), managed by admins only.

Revision ID: 0015_owner_keys
Revises: 0014_quotas_approvals
Create Date: 2026-12-04 18:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015_owner_keys"
down_revision: str | None = "0014_quotas_approvals"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "tenants",
        sa.Column(
            "owners_create_analyst_keys", sa.Boolean(), nullable=False, server_default=sa.false()
        ),
    )
    op.add_column("api_keys", sa.Column("created_by", sa.Uuid(), nullable=True))


def downgrade() -> None:
    # Plain DROP COLUMNs (SQLite ≥ 3.35 drops a column without constraints in place).
    op.drop_column("api_keys", "created_by")
    op.drop_column("tenants", "owners_create_analyst_keys")
