"""All SQL for tenants and API keys."""

from __future__ import annotations

import uuid

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from app.auth.models import ApiKey, Tenant


def get_or_create_tenant(session: Session, name: str) -> Tenant:
    # INSERT ... ON CONFLICT DO NOTHING: two key creations for a new tenant must not race into
    # a unique violation; whichever commits second reuses the first one's tenant.
    insert = pg_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert
    session.execute(
        insert(Tenant)
        .values(id=uuid.uuid4(), name=name)
        .on_conflict_do_nothing(index_elements=["name"])
    )
    tenant = session.scalars(select(Tenant).where(Tenant.name == name)).one()
    return tenant


def add_key(session: Session, key: ApiKey) -> ApiKey:
    session.add(key)
    session.flush()
    return key


def find_active_key(session: Session, key_hash: str) -> ApiKey | None:
    return session.scalars(
        select(ApiKey).where(ApiKey.key_hash == key_hash, ApiKey.revoked_at.is_(None))
    ).one_or_none()


def key_names(
    session: Session, tenant_id: uuid.UUID, key_ids: set[uuid.UUID]
) -> dict[uuid.UUID, str]:
    """The names of these keys of the tenant (revoked ones too: a ledger outlives its keys)."""
    if not key_ids:
        return {}
    rows = session.execute(
        select(ApiKey.id, ApiKey.name).where(ApiKey.tenant_id == tenant_id, ApiKey.id.in_(key_ids))
    ).all()
    return {row.id: row.name for row in rows}
