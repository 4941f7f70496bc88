"""Wire types of webhook subscriptions and their delivery log."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from app.api.types import RhoIn, RhoOut

# Every event the service emits.
EMITTED_EVENTS = (
    "job.succeeded",
    "job.failed",
    "job.cancelled",
    "sample.ready",
    "budget.below_threshold",
    "approval.requested",
    "approval.decided",
)
EVENT_NAMES = EMITTED_EVENTS

EventName = Literal[
    "job.succeeded",
    "job.failed",
    "job.cancelled",
    "sample.ready",
    "budget.below_threshold",
    "approval.requested",
    "approval.decided",
]
DeliveryStatus = Literal["pending", "delivered", "failed", "discarded"]


class WebhookCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(
        min_length=8,
        max_length=2000,
        pattern=r"^https?://\S+$",
        description="http or https; the operator may restrict the hosts "
        "(RHOSYNTH_WEBHOOK_ALLOWED_HOSTS)",
    )
    events: list[EventName] = Field(min_length=1, max_length=len(EVENT_NAMES))
    description: str = Field(default="", max_length=500)
    enabled: bool = True
    budget_threshold_rho: RhoIn | None = Field(
        default=None,
        description="budget.below_threshold: sent when a dataset's remaining ρ falls below "
        "this (required with that event)",
    )


class WebhookOut(BaseModel):
    id: uuid.UUID
    url: str
    events: list[str]
    description: str
    enabled: bool
    budget_threshold_rho: RhoOut | None
    created_at: datetime


class CreatedWebhookOut(WebhookOut):
    secret: str = Field(description="the signing secret: shown in this answer only")


class WebhookList(BaseModel):
    items: list[WebhookOut]


class DeliveryOut(BaseModel):
    id: uuid.UUID
    event_id: uuid.UUID
    event_type: str
    status: DeliveryStatus
    attempts: int
    last_status_code: int | None
    last_error: str | None = Field(description="the transport error's kind, if any")
    last_attempt_at: datetime | None
    next_attempt_at: datetime | None = Field(description="null once delivered or given up")
    delivered_at: datetime | None
    created_at: datetime


class DeliveryList(BaseModel):
    items: list[DeliveryOut]
    next_offset: int | None
