"""Who am I, and the tenant's keys over the API (admin keys; issue 27 §1)."""

from __future__ import annotations

import uuid
from datetime import timedelta

from fastapi import APIRouter, HTTPException, status
from pydantic import BaseModel

from app.api.deps import AdminKey, CurrentKey, DatabaseDep, KeyManagerKey, KeySecretDep
from app.api.errors import error_responses
from app.api.limits import FiniteJSONRoute
from app.auth import service
from app.auth.schemas import (
    CreatedKeyOut,
    KeyCreate,
    KeyExpiry,
    KeyList,
    KeyOut,
    KeyPolicy,
    KeyRotate,
)

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


def _forbidden(error: service.KeysForbidden) -> HTTPException:
    return HTTPException(status.HTTP_403_FORBIDDEN, str(error))


# Before /{key_id}: "policy" is not a key id.
@keys_router.get("/policy", response_model=KeyPolicy)
def get_key_policy(db: DatabaseDep, admin: AdminKey) -> KeyPolicy:
    """The tenant's key policy: may owner keys create analyst keys?"""
    with db.read() as session:
        return KeyPolicy(owners_create_analyst_keys=service.get_key_policy(session, admin))


@keys_router.put("/policy", response_model=KeyPolicy)
def set_key_policy(body: KeyPolicy, db: DatabaseDep, admin: AdminKey) -> KeyPolicy:
    """Set the tenant's key policy (audited as ``key.policy``)."""
    with db.transaction() as session:
        value = service.set_key_policy(session, admin, body.owners_create_analyst_keys)
        return KeyPolicy(owners_create_analyst_keys=value)


@keys_router.post(
    "",
    response_model=CreatedKeyOut,
    status_code=status.HTTP_201_CREATED,
)
def create_key(
    body: KeyCreate, db: DatabaseDep, secret: KeySecretDep, admin: KeyManagerKey
) -> CreatedKeyOut:
    """Create a key of the tenant; its secret is in this answer only. Owner keys, if the
    tenant's policy allows it, create analyst keys limited to datasets they see."""
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
    except service.KeysForbidden as error:
        raise _forbidden(error) from None


@keys_router.get("", response_model=KeyList)
def list_keys(db: DatabaseDep, admin: KeyManagerKey) -> KeyList:
    """The tenant's keys (an owner key: those it created), revoked and expired ones too
    (never their secrets)."""
    try:
        with db.read() as session:
            return KeyList(items=[KeyOut.of(v) for v in service.list_tenant_keys(session, admin)])
    except service.KeysForbidden as error:
        raise _forbidden(error) from None


@keys_router.get("/{key_id}", response_model=KeyOut)
def get_key(key_id: uuid.UUID, db: DatabaseDep, admin: KeyManagerKey) -> KeyOut:
    """One key of the tenant (an owner key: one it created; never its secret)."""
    try:
        with db.read() as session:
            return KeyOut.of(service.get_tenant_key(session, admin, key_id))
    except service.KeyNotFound:
        raise _not_found() from None
    except service.KeysForbidden as error:
        raise _forbidden(error) from None


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
    admin: KeyManagerKey,
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
    except service.KeysForbidden as error:
        raise _forbidden(error) from None


@keys_router.post("/{key_id}/revoke", response_model=KeyOut, responses=error_responses(409))
def revoke_key(key_id: uuid.UUID, db: DatabaseDep, admin: KeyManagerKey) -> KeyOut:
    """Revoke a key at once (again: no change); not the tenant's last active admin key. An
    owner key revokes only keys it created."""
    try:
        with db.transaction() as session:
            return KeyOut.of(service.revoke_key(session, admin, key_id))
    except service.KeyNotFound:
        raise _not_found() from None
    except service.KeyConflict as error:
        raise HTTPException(status.HTTP_409_CONFLICT, str(error)) from None
    except service.KeysForbidden as error:
        raise _forbidden(error) from None


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
