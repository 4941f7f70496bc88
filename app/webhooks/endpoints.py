"""/v1/webhooks: a tenant's webhook subscriptions and their delivery log (admin keys)."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, status

from app.api.deps import AdminKey, DatabaseDep, SettingsDep
from app.api.errors import error_responses
from app.api.limits import FiniteJSONRoute
from app.webhooks import service
from app.webhooks.delivery import ring
from app.webhooks.models import WebhookDelivery, WebhookEvent, WebhookSubscription
from app.webhooks.schemas import (
    CreatedWebhookOut,
    DeliveryList,
    DeliveryOut,
    WebhookCreate,
    WebhookList,
    WebhookOut,
)

router = APIRouter(
    prefix="/v1/webhooks",
    tags=["webhooks"],
    # The common answers of every /v1 router: a body that is not JSON (400), too large (413).
    responses=error_responses(400, 401, 403, 404, 413, 422),
    route_class=FiniteJSONRoute,
)


def _out(subscription: WebhookSubscription) -> WebhookOut:
    return WebhookOut(
        id=subscription.id,
        url=subscription.url,
        events=subscription.events,
        description=subscription.description,
        enabled=subscription.enabled,
        budget_threshold_rho=subscription.budget_threshold_rho,
        created_at=subscription.created_at,
    )


def _delivery_out(delivery: WebhookDelivery, event: WebhookEvent) -> DeliveryOut:
    return DeliveryOut(
        id=delivery.id,
        event_id=event.public_id,
        event_type=event.type,
        status=delivery.status,
        attempts=delivery.attempts,
        last_status_code=delivery.last_status_code,
        last_error=delivery.last_error,
        last_attempt_at=delivery.last_attempt_at,
        next_attempt_at=delivery.next_attempt_at if delivery.status == "pending" else None,
        delivered_at=delivery.delivered_at,
        created_at=delivery.created_at,
    )


def _not_found() -> HTTPException:
    return HTTPException(status.HTTP_404_NOT_FOUND, "webhook not found")


@router.post(
    "",
    response_model=CreatedWebhookOut,
    status_code=status.HTTP_201_CREATED,
    responses=error_responses(401, 403, 422),
)
def create_webhook(
    body: WebhookCreate, db: DatabaseDep, settings: SettingsDep, admin: AdminKey
) -> CreatedWebhookOut:
    """Subscribe a URL to events; the signing secret is in this answer only."""
    try:
        with db.transaction() as session:
            created = service.create_subscription(
                session,
                admin,
                url=body.url,
                events=list(body.events),
                description=body.description,
                enabled=body.enabled,
                budget_threshold_rho=body.budget_threshold_rho,
                allowed_hosts=settings.webhook_allowed_hosts,
            )
            return CreatedWebhookOut(secret=created.secret, **_out(created).model_dump())
    except service.InvalidWebhook as error:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_ENTITY, str(error)) from None


@router.get("", response_model=WebhookList, responses=error_responses(401, 403))
def list_webhooks(db: DatabaseDep, admin: AdminKey) -> WebhookList:
    """The tenant's webhook subscriptions (never their secrets)."""
    with db.read() as session:
        return WebhookList(items=[_out(s) for s in service.list_subscriptions(session, admin)])


@router.get("/{webhook_id}", response_model=WebhookOut, responses=error_responses(401, 403, 404))
def get_webhook(webhook_id: uuid.UUID, db: DatabaseDep, admin: AdminKey) -> WebhookOut:
    """One subscription (never its secret)."""
    try:
        with db.read() as session:
            return _out(service.get_subscription(session, admin, webhook_id))
    except service.WebhookNotFound:
        raise _not_found() from None


@router.delete(
    "/{webhook_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=error_responses(401, 403, 404),
)
def delete_webhook(webhook_id: uuid.UUID, db: DatabaseDep, admin: AdminKey) -> None:
    """Delete a subscription; what it is still owed is discarded (its log stays readable)."""
    try:
        with db.transaction() as session:
            service.delete_subscription(session, admin, webhook_id)
    except service.WebhookNotFound:
        raise _not_found() from None


@router.post(
    "/{webhook_id}/rotate-secret",
    response_model=CreatedWebhookOut,
    responses=error_responses(401, 403, 404),
)
def rotate_secret(webhook_id: uuid.UUID, db: DatabaseDep, admin: AdminKey) -> CreatedWebhookOut:
    """A new signing secret, in this answer only; the old one also signs for 24 hours."""
    try:
        with db.transaction() as session:
            rotated = service.rotate_secret(session, admin, webhook_id)
            return CreatedWebhookOut(secret=rotated.secret, **_out(rotated).model_dump())
    except service.WebhookNotFound:
        raise _not_found() from None


@router.get(
    "/{webhook_id}/deliveries",
    response_model=DeliveryList,
    responses=error_responses(401, 403, 404),
)
def list_deliveries(
    webhook_id: uuid.UUID,
    db: DatabaseDep,
    admin: AdminKey,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    offset: Annotated[int, Query(ge=0, le=2**31)] = 0,
) -> DeliveryList:
    """The subscription's delivery log, newest event first."""
    try:
        with db.read() as session:
            rows = service.list_deliveries(session, admin, webhook_id, limit=limit, offset=offset)
            items = [_delivery_out(d, e) for d, e in rows]
    except service.WebhookNotFound:
        raise _not_found() from None
    return DeliveryList(items=items, next_offset=offset + limit if len(items) == limit else None)


@router.post(
    "/deliveries/{delivery_id}/replay",
    response_model=DeliveryOut,
    status_code=status.HTTP_202_ACCEPTED,
    responses=error_responses(401, 403, 404),
)
def replay_delivery(
    delivery_id: uuid.UUID, db: DatabaseDep, settings: SettingsDep, admin: AdminKey
) -> DeliveryOut:
    """Send a delivery again (whatever its status); the webhook worker sends it."""
    try:
        with db.transaction() as session:
            delivery, event = service.replay_delivery(session, admin, delivery_id)
            out = _delivery_out(delivery, event)
    except service.WebhookNotFound:
        raise HTTPException(status.HTTP_404_NOT_FOUND, "delivery not found") from None
    ring(settings, event.public_id)
    return out
