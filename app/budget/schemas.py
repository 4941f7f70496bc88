"""Quota and quota-policy bodies (issue 27 §2)."""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.api.types import RhoIn, RhoOut, check_rho_scale

GROUP_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$"


MAX_QUOTA_RHO = Decimal(9_000_000)
"""No dataset's budget can pass this (the largest ``max_budget_rho`` settings allow), so no
quota needs more; larger amounts would not fit the ledger's columns either."""


class QuotaIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rho: RhoIn = Field(description="the ρ the key may reserve and spend on the dataset, in all")

    @field_validator("rho")
    @classmethod
    def _scale(cls, value: Decimal) -> Decimal:
        if value > MAX_QUOTA_RHO:
            raise ValueError(f"a quota is at most ρ = {MAX_QUOTA_RHO}")
        return check_rho_scale(value)


class QuotaGroupIn(QuotaIn):
    keys: list[uuid.UUID] = Field(
        min_length=1, max_length=1000, description="the analyst keys that share the quota"
    )


class QuotaOut(BaseModel):
    id: uuid.UUID
    kind: Literal["key", "group"]
    key_id: uuid.UUID | None = Field(description="the key of a key's quota")
    group: str | None = Field(description="the name of a group's quota")
    keys: list[uuid.UUID] = Field(description="the keys it limits")
    granted_rho: RhoOut
    reserved_rho: RhoOut = Field(description="held by jobs not yet started")
    spent_rho: RhoOut = Field(description="charged by jobs that started; never refunded")
    remaining_rho: RhoOut = Field(description="granted − reserved − spent")
    available_rho: RhoOut = Field(
        description="what a job could reserve now: the remaining ρ, up to the dataset's"
    )


class QuotaPolicyIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mode: Literal["shared", "reserved"] = Field(
        description="shared: quotas may add up past the dataset's budget (first come, first "
        "served); reserved: the quotas' unused shares never pass what the dataset has left"
    )
    quota_required: bool = Field(
        default=False, description="analyst keys without a quota on the dataset cannot submit"
    )
    approval_required: bool = Field(
        default=False,
        description="jobs of analyst keys wait in pending_approval (budget reserved) until an "
        "owner approves or rejects them",
    )


class QuotaPolicyOut(BaseModel):
    mode: Literal["shared", "reserved"]
    quota_required: bool
    approval_required: bool
    quotas_unused_rho: RhoOut = Field(description="Σ of the quotas' remaining ρ")
    dataset_remaining_rho: RhoOut


class QuotaList(BaseModel):
    policy: QuotaPolicyOut
    items: list[QuotaOut]
