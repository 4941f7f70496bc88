"""Wire types for derived samples."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SampleStatus = Literal["queued", "running", "succeeded", "failed", "expired", "deleted"]


class SampleRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rows: int | None = Field(
        default=None, ge=1, description="rows to draw; default: as many as the job's output"
    )
    seed: int | None = Field(
        default=None,
        ge=0,
        le=2**53 - 1,
        description="seeds the draw: the same seed on the same job gives the same rows; "
        "default: a random seed (returned)",
    )


class SampleOut(BaseModel):
    id: uuid.UUID
    job_id: uuid.UUID
    dataset_id: uuid.UUID
    rows: int
    seed: int
    rho: Literal["0"] = Field(
        default="0", description="a sample is post-processing of a published model: no ρ"
    )
    status: SampleStatus
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    error: str | None
    output_rows: int | None


class SampleList(BaseModel):
    items: list[SampleOut]
    next_offset: int | None
