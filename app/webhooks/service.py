"""Webhook subscriptions of a tenant, managed by its admin keys (issue 27 §4)."""

from __future__ import annotations

import secrets
import uuid
from datetime import timedelta
from decimal import Decimal
from urllib.parse import urlsplit

from sqlalchemy.orm import Session

from app.audit import service as audit
from app.auth.service import Principal
from app.db.base import utcnow
from app.webhooks import repository
from app.webhooks.models import WebhookDelivery, WebhookEvent, WebhookSubscription


class InvalidWebhook(ValueError):
    """A subscription request the service refuses (422)."""


class WebhookNotFound(LookupError):
    pass


def new_secret() -> str:
    return "whsec_" + secrets.token_urlsafe(32)


def check_url(url: str, allowed_hosts: list[str]) -> None:
    """Only http and https, with a host; with an allow-list, only its hosts."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidWebhook("the URL must be http:// or https:// with a host")
    if parts.username or parts.password:
        raise InvalidWebhook("the URL must not carry credentials")
    if allowed_hosts and parts.hostname.lower() not in {h.lower() for h in allowed_hosts}:
        raise InvalidWebhook(
            "the URL's host is not one the operator allows (RHOSYNTH_WEBHOOK_ALLOWED_HOSTS)"
        )


def create_subscription(
    session: Session,
    admin: Principal,
    *,
    url: str,
    events: list[str],
    description: str,
    enabled: bool,
    budget_threshold_rho: Decimal | None,
    allowed_hosts: list[str],
) -> WebhookSubscription:
    check_url(url, allowed_hosts)
    wants_budget = "budget.below_threshold" in events
    if wants_budget != (budget_threshold_rho is not None):
        raise InvalidWebhook(
            "budget_threshold_rho is required with budget.below_threshold, and only with it"
        )
    subscription = repository.add_subscription(
        session,
        WebhookSubscription(
            tenant_id=admin.tenant_id,
            url=url,
            events=sorted(set(events)),
            description=description,
            enabled=enabled,
            secret=new_secret(),
            budget_threshold_rho=budget_threshold_rho,
            created_by=admin.key_id,
            created_at=utcnow(),
        ),
    )
    audit.record(
        session,
        admin,
        "webhook.create",
        "webhook",
        subscription.id,
        {"url": url, "events": list(subscription.events)},
    )
    return subscription


def list_subscriptions(session: Session, admin: Principal) -> list[WebhookSubscription]:
    return repository.list_subscriptions(session, admin.tenant_id)


def get_subscription(
    session: Session, admin: Principal, subscription_id: uuid.UUID
) -> WebhookSubscription:
    found = repository.get_subscription(session, admin.tenant_id, subscription_id)
    if found is None:
        raise WebhookNotFound(subscription_id)
    return found


def delete_subscription(session: Session, admin: Principal, subscription_id: uuid.UUID) -> None:
    get_subscription(session, admin, subscription_id)
    repository.delete_subscription(session, subscription_id, utcnow())
    audit.record(session, admin, "webhook.delete", "webhook", subscription_id)


SECRET_OVERLAP = timedelta(hours=24)


def rotate_secret(
    session: Session, admin: Principal, subscription_id: uuid.UUID
) -> WebhookSubscription:
    """A new signing secret; the old one keeps signing too for ``SECRET_OVERLAP`` (each
    delivery then carries two ``v1`` signatures), so the receiver can switch without refusing
    a delivery."""
    subscription = repository.lock_subscription(session, admin.tenant_id, subscription_id)
    if subscription is None:
        raise WebhookNotFound(subscription_id)
    subscription.previous_secret = subscription.secret
    subscription.previous_secret_until = utcnow() + SECRET_OVERLAP
    subscription.secret = new_secret()
    session.flush()
    audit.record(session, admin, "webhook.rotate_secret", "webhook", subscription.id)
    return subscription


def list_deliveries(
    session: Session, admin: Principal, subscription_id: uuid.UUID, *, limit: int, offset: int
) -> list[tuple[WebhookDelivery, WebhookEvent]]:
    get_subscription(session, admin, subscription_id)
    return repository.list_deliveries(session, subscription_id, limit=limit, offset=offset)


def replay_delivery(
    session: Session, admin: Principal, delivery_id: uuid.UUID
) -> tuple[WebhookDelivery, WebhookEvent]:
    """Send the delivery again: pending, due now, with a fresh backoff. Its job's later
    pending events wait for it again (the order rule)."""
    found = repository.get_delivery_for_tenant(session, admin.tenant_id, delivery_id)
    if found is None:
        raise WebhookNotFound(delivery_id)
    repository.replay(session, delivery_id, utcnow())
    session.refresh(found[0])
    audit.record(
        session,
        admin,
        "webhook.replay",
        "webhook",
        found[0].subscription_id,
        {"delivery_id": str(delivery_id)},
    )
    return found
