"""Who am I, and the tenant's keys over the API (admin keys; issue 27 §1)."""

from __future__ import annotations

import uuid
from datetime import timedelta

from fastapi import APIRouter, HTTPException, status
from pydantic import BaseModel

from app.api.deps import AdminKey, CurrentKey, DatabaseDep, KeySecretDep
from app.api.errors import error_responses
from app.api.limits import FiniteJSONRoute
from app.auth import service
from app.auth.schemas import CreatedKeyOut, KeyCreate, KeyExpiry, KeyList, KeyOut, KeyRotate

router = APIRouter(prefix="/v1", tags=["auth"])
keys_router = APIRouter(
    prefix="/v1/keys",
    tags=["keys"],
    responses=error_responses(400, 401, 403, 404, 413, 422),
    route_class=FiniteJSONRoute,
)


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


def _not_found() -> HTTPException:
    return HTTPException(status.HTTP_404_NOT_FOUND, "key not found")


def _created(secret_key: str, view: service.KeyView) -> CreatedKeyOut:
    return CreatedKeyOut(key=secret_key, **KeyOut.of(view).model_dump())


@keys_router.post(
    "",
    response_model=CreatedKeyOut,
    status_code=status.HTTP_201_CREATED,
)
def create_key(
    body: KeyCreate, db: DatabaseDep, secret: KeySecretDep, admin: AdminKey
) -> CreatedKeyOut:
    """Create a key of the tenant; its secret is in this answer only."""
    try:
        with db.transaction() as session:
            secret_key, view = service.create_tenant_key(
                session,
                secret,
                admin,
                role=body.role,
                name=body.name,
                expires_at=body.expires_at,
                datasets=body.datasets,
            )
            return _created(secret_key, view)
    except service.InvalidKeyRequest as error:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(error)) from None


@keys_router.get("", response_model=KeyList)
def list_keys(db: DatabaseDep, admin: AdminKey) -> KeyList:
    """The tenant's keys, revoked and expired ones too (never their secrets)."""
    with db.read() as session:
        return KeyList(items=[KeyOut.of(v) for v in service.list_tenant_keys(session, admin)])


@keys_router.get("/{key_id}", response_model=KeyOut)
def get_key(key_id: uuid.UUID, db: DatabaseDep, admin: AdminKey) -> KeyOut:
    """One key of the tenant (never its secret)."""
    try:
        with db.read() as session:
            return KeyOut.of(service.get_tenant_key(session, admin, key_id))
    except service.KeyNotFound:
        raise _not_found() from None


@keys_router.post(
    "/{key_id}/rotate",
    response_model=CreatedKeyOut,
    status_code=status.HTTP_201_CREATED,
    responses=error_responses(409),
)
def rotate_key(
    key_id: uuid.UUID,
    db: DatabaseDep,
    secret: KeySecretDep,
    admin: AdminKey,
    body: KeyRotate | None = None,
) -> CreatedKeyOut:
    """A new key in place of this one; the old secret works until the overlap ends."""
    overlap = timedelta(seconds=(body or KeyRotate()).overlap_seconds)
    try:
        with db.transaction() as session:
            secret_key, view = service.rotate_key(session, secret, admin, key_id, overlap)
            return _created(secret_key, view)
    except service.KeyNotFound:
        raise _not_found() from None
    except service.KeyConflict as error:
        raise HTTPException(status.HTTP_409_CONFLICT, str(error)) from None


@keys_router.post("/{key_id}/revoke", response_model=KeyOut, responses=error_responses(409))
def revoke_key(key_id: uuid.UUID, db: DatabaseDep, admin: AdminKey) -> KeyOut:
    """Revoke a key at once (again: no change); not the tenant's last active admin key."""
    try:
        with db.transaction() as session:
            return KeyOut.of(service.revoke_key(session, admin, key_id))
    except service.KeyNotFound:
        raise _not_found() from None
    except service.KeyConflict as error:
        raise HTTPException(status.HTTP_409_CONFLICT, str(error)) from None


@keys_router.patch("/{key_id}", response_model=KeyOut, responses=error_responses(409))
def set_key_expiry(key_id: uuid.UUID, body: KeyExpiry, db: DatabaseDep, admin: AdminKey) -> KeyOut:
    """Set or clear (null) a key's expiry."""
    try:
        with db.transaction() as session:
            return KeyOut.of(service.set_key_expiry(session, admin, key_id, body.expires_at))
    except service.KeyNotFound:
        raise _not_found() from None
    except service.KeyConflict as error:
        raise HTTPException(status.HTTP_409_CONFLICT, str(error)) from None
    except service.InvalidKeyRequest as error:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(error)) from None
