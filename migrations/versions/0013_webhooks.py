"""Webhooks (issue 27 §4): subscriptions, the outbox of events and one delivery row per
(event, subscription).

* ``webhook_subscriptions``: a tenant's receiver URL, its event names, its signing secret (and,
  for a day after a rotation, the previous one) and the optional ρ threshold of
  ``budget.below_threshold``; deleted subscriptions keep their row
  (``deleted_at``) so the delivery log stays readable.
* ``webhook_events``: written in the transaction of the state change that causes it; ``id`` is the
  outbox's order, ``ordering_key`` the job whose events must arrive in order.
* ``webhook_deliveries``: pending until delivered, given up (``failed``) or discarded.

Revision ID: 0013_webhooks
Revises: 0012_audit
Create Date: 2026-12-04 16:27:01.298407
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from app.db.base import UTCDateTime
from app.db.types import Rho

revision: str = "0013_webhooks"
down_revision: str | None = "0012_audit"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_SERIAL = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "webhook_subscriptions",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("tenant_id", sa.Uuid(), nullable=False),
        sa.Column("url", sa.String(length=2000), nullable=False),
        sa.Column("events", sa.JSON(), nullable=False),
        sa.Column("description", sa.String(length=500), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("secret", sa.String(length=100), nullable=False),
        sa.Column("previous_secret", sa.String(length=100), nullable=True),
        sa.Column("previous_secret_until", UTCDateTime(), nullable=True),
        sa.Column("budget_threshold_rho", Rho(), nullable=True),
        sa.Column("created_by", sa.Uuid(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("deleted_at", UTCDateTime(), nullable=True),
        sa.CheckConstraint(
            "budget_threshold_rho IS NULL OR budget_threshold_rho >= 0",
            name=op.f("ck_webhook_subscriptions_threshold"),
        ),
        sa.ForeignKeyConstraint(
            ["created_by"],
            ["api_keys.id"],
            name=op.f("fk_webhook_subscriptions_created_by_api_keys"),
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_webhook_subscriptions_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_subscriptions")),
    )
    op.create_index(
        op.f("ix_webhook_subscriptions_tenant_id"), "webhook_subscriptions", ["tenant_id"]
    )
    op.create_table(
        "webhook_events",
        sa.Column("id", _SERIAL, autoincrement=True, nullable=False),
        sa.Column("public_id", sa.Uuid(), nullable=False),
        sa.Column("tenant_id", sa.Uuid(), nullable=False),
        sa.Column("type", sa.String(length=64), nullable=False),
        sa.Column("ordering_key", sa.Uuid(), nullable=True),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_webhook_events_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_events")),
        sa.UniqueConstraint("public_id", name=op.f("uq_webhook_events_public_id")),
    )
    op.create_index(op.f("ix_webhook_events_tenant_id"), "webhook_events", ["tenant_id"])
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("event_id", _SERIAL, nullable=False),
        sa.Column("subscription_id", sa.Uuid(), nullable=False),
        sa.Column("ordering_key", sa.Uuid(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("tries", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", UTCDateTime(), nullable=False),
        sa.Column("last_attempt_at", UTCDateTime(), nullable=True),
        sa.Column("last_status_code", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.String(length=200), nullable=True),
        sa.Column("delivered_at", UTCDateTime(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.CheckConstraint(
            "status IN ('pending', 'delivered', 'failed', 'discarded')",
            name=op.f("ck_webhook_deliveries_status"),
        ),
        sa.ForeignKeyConstraint(
            ["event_id"],
            ["webhook_events.id"],
            name=op.f("fk_webhook_deliveries_event_id_webhook_events"),
        ),
        sa.ForeignKeyConstraint(
            ["subscription_id"],
            ["webhook_subscriptions.id"],
            name=op.f("fk_webhook_deliveries_subscription_id_webhook_subscriptions"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_deliveries")),
        sa.UniqueConstraint("event_id", "subscription_id", name="uq_webhook_deliveries_event"),
    )
    op.create_index(
        "ix_webhook_deliveries_due", "webhook_deliveries", ["status", "next_attempt_at"]
    )
    op.create_index(
        "ix_webhook_deliveries_order",
        "webhook_deliveries",
        ["subscription_id", "ordering_key", "event_id"],
    )


def downgrade() -> None:
    op.drop_index("ix_webhook_deliveries_order", table_name="webhook_deliveries")
    op.drop_index("ix_webhook_deliveries_due", table_name="webhook_deliveries")
    op.drop_table("webhook_deliveries")
    op.drop_index(op.f("ix_webhook_events_tenant_id"), table_name="webhook_events")
    op.drop_table("webhook_events")
    op.drop_index(op.f("ix_webhook_subscriptions_tenant_id"), table_name="webhook_subscriptions")
    op.drop_table("webhook_subscriptions")
