"""Every query of webhook subscriptions, events and deliveries."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import ColumnElement, and_, exists, select, update
from sqlalchemy.orm import Session, aliased

from app.db.session import after_commit
from app.webhooks.models import WebhookDelivery, WebhookEvent, WebhookSubscription


def add_subscription(session: Session, subscription: WebhookSubscription) -> WebhookSubscription:
    session.add(subscription)
    session.flush()
    return subscription


def get_subscription(
    session: Session, tenant_id: uuid.UUID, subscription_id: uuid.UUID
) -> WebhookSubscription | None:
    """The tenant's live subscription (None for another tenant's or a deleted one)."""
    return session.scalars(
        select(WebhookSubscription).where(
            WebhookSubscription.id == subscription_id,
            WebhookSubscription.tenant_id == tenant_id,
            WebhookSubscription.deleted_at.is_(None),
        )
    ).one_or_none()


def lock_subscription(
    session: Session, tenant_id: uuid.UUID, subscription_id: uuid.UUID
) -> WebhookSubscription | None:
    """The tenant's live subscription, locked: two rotations at once must not both keep the
    same "previous" secret (one of the new secrets would be lost without ever being shown as
    previous)."""
    return session.scalars(
        select(WebhookSubscription)
        .where(
            WebhookSubscription.id == subscription_id,
            WebhookSubscription.tenant_id == tenant_id,
            WebhookSubscription.deleted_at.is_(None),
        )
        .with_for_update()
    ).one_or_none()


def list_subscriptions(session: Session, tenant_id: uuid.UUID) -> list[WebhookSubscription]:
    return list(
        session.scalars(
            select(WebhookSubscription)
            .where(
                WebhookSubscription.tenant_id == tenant_id,
                WebhookSubscription.deleted_at.is_(None),
            )
            .order_by(WebhookSubscription.created_at, WebhookSubscription.id)
        )
    )


def delete_subscription(session: Session, subscription_id: uuid.UUID, now: datetime) -> None:
    """Mark it deleted and discard what it is still owed (the log stays readable)."""
    session.execute(
        update(WebhookSubscription)
        .where(WebhookSubscription.id == subscription_id)
        .values(deleted_at=now, enabled=False)
    )
    session.execute(
        update(WebhookDelivery)
        .where(
            WebhookDelivery.subscription_id == subscription_id,
            WebhookDelivery.status == "pending",
        )
        .values(status="discarded")
    )


def subscribers(
    session: Session, tenant_id: uuid.UUID, event_type: str
) -> list[WebhookSubscription]:
    """The tenant's enabled, live subscriptions (the caller filters by event name: a JSON list
    is not portably searchable in SQL, and a tenant has few subscriptions)."""
    rows = session.scalars(
        select(WebhookSubscription).where(
            WebhookSubscription.tenant_id == tenant_id,
            WebhookSubscription.enabled.is_(True),
            WebhookSubscription.deleted_at.is_(None),
        )
    )
    return [row for row in rows if event_type in row.events]


def add_event(
    session: Session,
    *,
    public_id: uuid.UUID,
    tenant_id: uuid.UUID,
    event_type: str,
    ordering_key: uuid.UUID | None,
    payload: dict[str, Any],
    subscription_ids: Sequence[uuid.UUID],
    now: datetime,
    after_commit_ring: Callable[[], None] | None = None,
) -> WebhookEvent:
    """The event and one pending delivery per subscription, due now; ``after_commit_ring`` runs
    once the transaction has committed (never on rollback)."""
    event = WebhookEvent(
        public_id=public_id,
        tenant_id=tenant_id,
        type=event_type,
        ordering_key=ordering_key,
        payload=payload,
        created_at=now,
    )
    session.add(event)
    session.flush()
    for subscription_id in subscription_ids:
        session.add(
            WebhookDelivery(
                event_id=event.id,
                subscription_id=subscription_id,
                ordering_key=ordering_key,
                next_attempt_at=now,
                created_at=now,
            )
        )
    session.flush()
    if after_commit_ring is not None:
        after_commit(session, after_commit_ring)
    return event


def _sendable(now: datetime) -> tuple[ColumnElement[bool], ...]:
    """Pending, due, and not behind an earlier pending event of the same job (same
    subscription)."""
    earlier = aliased(WebhookDelivery)
    blocked = exists().where(
        earlier.subscription_id == WebhookDelivery.subscription_id,
        earlier.ordering_key == WebhookDelivery.ordering_key,
        earlier.event_id < WebhookDelivery.event_id,
        earlier.status == "pending",
    )
    return (
        WebhookDelivery.status == "pending",
        WebhookDelivery.next_attempt_at <= now,
        ~and_(WebhookDelivery.ordering_key.is_not(None), blocked),
    )


def claim_due(
    session: Session, *, now: datetime, lease_until: datetime, limit: int
) -> list[uuid.UUID]:
    """Claim up to ``limit`` due deliveries whose job has no earlier pending delivery to the
    same subscription, and push their next attempt to ``lease_until`` (the claim's lease: a
    sender that dies leaves them due again then, so delivery is at least once).

    The order rule: a delivery waits while an earlier event of the same job (lower event id) is
    still pending for its subscription, whether due, in flight (claimed, so its next attempt
    lies in the future) or backing off; it goes once that one is delivered or given up.
    """
    query = (
        select(WebhookDelivery.id)
        .where(*_sendable(now))
        .order_by(WebhookDelivery.event_id, WebhookDelivery.id)
        .limit(limit)
        # FOR UPDATE SKIP LOCKED (PostgreSQL; SQLite ignores it and serialises writers): two
        # delivery passes at once must not both claim the same delivery, and the second must not
        # wait on the first's rows: it takes the next free ones. The NOT EXISTS reads the earlier
        # delivery without locking it; that is safe because a claimed delivery stays 'pending'
        # until its outcome commits, so a later event of its job stays blocked meanwhile.
        .with_for_update(skip_locked=True, of=WebhookDelivery)
    )
    ids = list(session.scalars(query))
    if ids:
        session.execute(
            update(WebhookDelivery)
            .where(WebhookDelivery.id.in_(ids))
            .values(next_attempt_at=lease_until)
        )
    return ids


def delivery_to_send(
    session: Session, delivery_id: uuid.UUID
) -> tuple[WebhookDelivery, WebhookEvent, WebhookSubscription] | None:
    row = session.execute(
        select(WebhookDelivery, WebhookEvent, WebhookSubscription)
        .join(WebhookEvent, WebhookEvent.id == WebhookDelivery.event_id)
        .join(WebhookSubscription, WebhookSubscription.id == WebhookDelivery.subscription_id)
        .where(WebhookDelivery.id == delivery_id)
    ).one_or_none()
    if row is None:
        return None
    return row[0], row[1], row[2]


def record_attempt(
    session: Session,
    delivery_id: uuid.UUID,
    *,
    now: datetime,
    status: str,
    status_code: int | None,
    error: str | None,
    next_attempt_at: datetime,
) -> None:
    """Write one try's outcome, if the delivery is still pending (a delete may have discarded
    it meanwhile)."""
    session.execute(
        update(WebhookDelivery)
        .where(WebhookDelivery.id == delivery_id, WebhookDelivery.status == "pending")
        .values(
            status=status,
            attempts=WebhookDelivery.attempts + 1,
            tries=WebhookDelivery.tries + 1,
            last_attempt_at=now,
            last_status_code=status_code,
            last_error=error,
            next_attempt_at=next_attempt_at,
            delivered_at=now if status == "delivered" else None,
        )
    )


def discard(session: Session, delivery_id: uuid.UUID) -> None:
    """Give up a pending delivery that is owed to no one (its subscription was deleted)."""
    session.execute(
        update(WebhookDelivery)
        .where(WebhookDelivery.id == delivery_id, WebhookDelivery.status == "pending")
        .values(status="discarded")
    )


def any_due(session: Session, now: datetime) -> bool:
    """Whether a pass would claim something now (a delivery waiting behind its job's earlier
    event that is backing off does not count: the sweep would ring for nothing)."""
    return (
        session.scalars(select(WebhookDelivery.id).where(*_sendable(now)).limit(1)).first()
        is not None
    )


def list_deliveries(
    session: Session, subscription_id: uuid.UUID, *, limit: int, offset: int
) -> list[tuple[WebhookDelivery, WebhookEvent]]:
    rows = session.execute(
        select(WebhookDelivery, WebhookEvent)
        .join(WebhookEvent, WebhookEvent.id == WebhookDelivery.event_id)
        .where(WebhookDelivery.subscription_id == subscription_id)
        .order_by(WebhookDelivery.event_id.desc())
        .limit(limit)
        .offset(offset)
    ).all()
    return [(row[0], row[1]) for row in rows]


def get_delivery_for_tenant(
    session: Session, tenant_id: uuid.UUID, delivery_id: uuid.UUID
) -> tuple[WebhookDelivery, WebhookEvent] | None:
    row = session.execute(
        select(WebhookDelivery, WebhookEvent)
        .join(WebhookEvent, WebhookEvent.id == WebhookDelivery.event_id)
        .join(WebhookSubscription, WebhookSubscription.id == WebhookDelivery.subscription_id)
        .where(
            WebhookDelivery.id == delivery_id,
            WebhookSubscription.tenant_id == tenant_id,
            WebhookSubscription.deleted_at.is_(None),
        )
        # FOR UPDATE: a replay and a delivery pass recording this delivery's outcome at once
        # must not interleave (the replay would be overwritten, or overwrite a success).
        .with_for_update(of=WebhookDelivery)
    ).one_or_none()
    return None if row is None else (row[0], row[1])


def replay(session: Session, delivery_id: uuid.UUID, now: datetime) -> None:
    """Make the delivery pending and due now, with a fresh backoff."""
    session.execute(
        update(WebhookDelivery)
        .where(WebhookDelivery.id == delivery_id)
        .values(status="pending", tries=0, next_attempt_at=now, delivered_at=None)
    )


def threshold_crossings(
    session: Session, tenant_id: uuid.UUID, before: Decimal, after: Decimal
) -> list[WebhookSubscription]:
    """Subscriptions to budget.below_threshold whose threshold lies in (after, before]."""
    return [
        s
        for s in subscribers(session, tenant_id, "budget.below_threshold")
        if s.budget_threshold_rho is not None and after < s.budget_threshold_rho <= before
    ]
