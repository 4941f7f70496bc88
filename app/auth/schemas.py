"""Wire types for API keys (never ORM objects; never a key's hash; its secret only once)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from app.auth.service import MAX_OVERLAP, KeyView

Role = Literal["owner", "analyst", "admin"]


class KeyCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200)
    role: Role
    expires_at: AwareDatetime | None = Field(
        default=None, description="the key stops working at this instant (absent: never)"
    )
    datasets: list[uuid.UUID] = Field(
        default_factory=list,
        max_length=1000,
        description="limit the key to these datasets of the tenant (empty: every dataset); "
        "not for admin keys",
    )


class KeyRotate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    overlap_seconds: int = Field(
        default=3600,
        ge=0,
        le=int(MAX_OVERLAP.total_seconds()),
        description="how long the old secret keeps working (at most 7 days)",
    )


class KeyExpiry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    expires_at: AwareDatetime | None = Field(description="a future instant, or null: never")


class KeyOut(BaseModel):
    """A key's public fields."""

    id: uuid.UUID
    name: str
    role: Role
    prefix: str = Field(description="the secret's first characters, to recognise it")
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    retires_at: datetime | None = Field(
        description="set by a rotation: the old secret stops working at this instant"
    )
    datasets: list[uuid.UUID] = Field(description="the datasets it is limited to (empty: all)")

    @classmethod
    def of(cls, view: KeyView) -> KeyOut:
        key = view.key
        return cls(
            id=key.id,
            name=key.name,
            role=key.role,
            prefix=key.prefix,
            created_at=key.created_at,
            expires_at=key.expires_at,
            revoked_at=key.revoked_at,
            retires_at=key.retires_at,
            datasets=view.datasets,
        )


class CreatedKeyOut(KeyOut):
    key: str = Field(description="the secret: shown in this answer only (only its hash is kept)")


class KeyList(BaseModel):
    items: list[KeyOut]


class KeyPolicy(BaseModel):
    """The tenant's key policy (set by admin keys)."""

    model_config = ConfigDict(extra="forbid")

    owners_create_analyst_keys: bool = Field(
        description="owner keys may create analyst keys limited to datasets they see, and "
        "list, rotate and revoke the keys they created (default: off)"
    )
