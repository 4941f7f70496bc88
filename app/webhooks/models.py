"""Webhook subscriptions and the durable outbox (issue 27 §4).

An event row is written in the transaction of the state change that causes it, with one delivery
row per subscription that wants it; the delivery worker (app/webhooks/delivery.py) sends the
deliveries after the commit. The database, not the broker, is the truth about what is owed.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    CheckConstraint,
    ForeignKey,
    Index,
    Integer,
    String,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, new_id, utcnow
from app.db.types import Rho

DELIVERY_STATUSES = ("pending", "delivered", "failed", "discarded")


class WebhookSubscription(Base):
    """Where a tenant wants its events sent, and the secret that signs them."""

    __tablename__ = "webhook_subscriptions"
    __table_args__ = (
        CheckConstraint(
            "budget_threshold_rho IS NULL OR budget_threshold_rho >= 0", name="threshold"
        ),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=new_id)
    tenant_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("tenants.id"), index=True)
    url: Mapped[str] = mapped_column(String(2000))
    events: Mapped[list[str]] = mapped_column(JSON)
    description: Mapped[str] = mapped_column(String(500), default="")
    enabled: Mapped[bool] = mapped_column(default=True)
    # Kept in the clear: signing needs it (like any HMAC secret); shown to the admin once.
    secret: Mapped[str] = mapped_column(String(100))
    # After a rotation the old secret also signs, until ``previous_secret_until`` (receivers
    # switch without refusing a delivery).
    previous_secret: Mapped[str | None] = mapped_column(String(100), default=None)
    previous_secret_until: Mapped[datetime | None] = mapped_column(default=None)
    # budget.below_threshold fires when a dataset's remaining ρ falls below this.
    budget_threshold_rho: Mapped[Decimal | None] = mapped_column(Rho(), default=None)
    created_by: Mapped[uuid.UUID] = mapped_column(ForeignKey("api_keys.id"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    deleted_at: Mapped[datetime | None] = mapped_column(default=None)


class WebhookEvent(Base):
    """One event of a tenant, its payload fixed when the state change committed."""

    __tablename__ = "webhook_events"

    # The outbox's order: BIGINT on PostgreSQL, INTEGER (the rowid alias) on SQLite.
    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True
    )
    public_id: Mapped[uuid.UUID] = mapped_column(unique=True, default=new_id)
    tenant_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("tenants.id"), index=True)
    type: Mapped[str] = mapped_column(String(64))
    # The job an event belongs to (job and sample events): deliveries keep its order.
    ordering_key: Mapped[uuid.UUID | None] = mapped_column(default=None)
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class WebhookDelivery(Base):
    """One event owed to one subscription: pending until delivered or given up."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        UniqueConstraint("event_id", "subscription_id", name="uq_webhook_deliveries_event"),
        CheckConstraint("status IN ('pending', 'delivered', 'failed', 'discarded')", name="status"),
        Index("ix_webhook_deliveries_due", "status", "next_attempt_at"),
        Index("ix_webhook_deliveries_order", "subscription_id", "ordering_key", "event_id"),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=new_id)
    event_id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"), ForeignKey("webhook_events.id")
    )
    subscription_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("webhook_subscriptions.id"))
    ordering_key: Mapped[uuid.UUID | None] = mapped_column(default=None)
    status: Mapped[str] = mapped_column(String(16), default="pending")
    # Every try ever; ``tries`` counts those since the last replay (the backoff's position).
    attempts: Mapped[int] = mapped_column(default=0)
    tries: Mapped[int] = mapped_column(default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_attempt_at: Mapped[datetime | None] = mapped_column(default=None)
    last_status_code: Mapped[int | None] = mapped_column(default=None)
    # The transport error's kind (e.g. "ConnectError"), never the receiver's body.
    last_error: Mapped[str | None] = mapped_column(String(200), default=None)
    delivered_at: Mapped[datetime | None] = mapped_column(default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
