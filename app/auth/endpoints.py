"""Who am I: the caller's key, tenant and role."""

from __future__ import annotations

import uuid

from fastapi import APIRouter
from pydantic import BaseModel

from app.api.deps import CurrentKey
from app.api.errors import error_responses

router = APIRouter(prefix="/v1", tags=["auth"])


class WhoAmI(BaseModel):
    key_id: uuid.UUID
    tenant_id: uuid.UUID
    role: str
    name: str


@router.get("/me", response_model=WhoAmI, responses=error_responses(401))
def whoami(principal: CurrentKey) -> WhoAmI:
    """The API key making this request: its tenant and role."""
    return WhoAmI(
        key_id=principal.key_id,
        tenant_id=principal.tenant_id,
        role=principal.role,
        name=principal.name,
    )
