"""All SQL for tenants and API keys."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import ColumnElement, delete, func, or_, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from app.auth.models import ApiKey, ApiKeyDataset, Tenant
from app.datasets.models import Dataset


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


def usable_at(now: datetime) -> list[ColumnElement[bool]]:
    """The conditions under which a key authenticates at ``now``: not revoked, not expired and
    not retired by a rotation (shared with the console's sessions, app/console/service.py)."""
    return [
        ApiKey.revoked_at.is_(None),
        or_(ApiKey.expires_at.is_(None), ApiKey.expires_at > now),
        or_(ApiKey.retires_at.is_(None), ApiKey.retires_at > now),
    ]


def find_active_key(
    session: Session, key_hash: str, now: datetime
) -> tuple[ApiKey, frozenset[uuid.UUID]] | None:
    """The usable key with this hash and the datasets it is limited to (empty: not limited), in
    one round trip."""
    rows = session.execute(
        select(ApiKey, ApiKeyDataset.dataset_id)
        .outerjoin(ApiKeyDataset, ApiKeyDataset.key_id == ApiKey.id)
        .where(ApiKey.key_hash == key_hash, *usable_at(now))
    ).all()
    if not rows:
        return None
    return rows[0][0], frozenset(row[1] for row in rows if row[1] is not None)


def key_datasets(session: Session, key_id: uuid.UUID) -> frozenset[uuid.UUID]:
    """The datasets a key is limited to (empty: not limited)."""
    return frozenset(
        session.scalars(select(ApiKeyDataset.dataset_id).where(ApiKeyDataset.key_id == key_id))
    )


def datasets_of_keys(
    session: Session, key_ids: Iterable[uuid.UUID]
) -> dict[uuid.UUID, list[uuid.UUID]]:
    """Each key's dataset limits, sorted (keys without limits are left out)."""
    ids = list(key_ids)
    if not ids:
        return {}
    found: dict[uuid.UUID, list[uuid.UUID]] = {}
    for key_id, dataset_id in session.execute(
        select(ApiKeyDataset.key_id, ApiKeyDataset.dataset_id)
        .where(ApiKeyDataset.key_id.in_(ids))
        .order_by(ApiKeyDataset.key_id, ApiKeyDataset.dataset_id)
    ):
        found.setdefault(key_id, []).append(dataset_id)
    return found


def limit_key_to(session: Session, key_id: uuid.UUID, dataset_ids: Iterable[uuid.UUID]) -> None:
    session.execute(delete(ApiKeyDataset).where(ApiKeyDataset.key_id == key_id))
    session.add_all(ApiKeyDataset(key_id=key_id, dataset_id=d) for d in dataset_ids)
    session.flush()


def tenant_dataset_ids(
    session: Session, tenant_id: uuid.UUID, dataset_ids: Iterable[uuid.UUID]
) -> set[uuid.UUID]:
    """Those of ``dataset_ids`` that are the tenant's datasets."""
    ids = list(dataset_ids)
    if not ids:
        return set()
    return set(
        session.scalars(
            select(Dataset.id).where(Dataset.tenant_id == tenant_id, Dataset.id.in_(ids))
        )
    )


def list_keys(
    session: Session, tenant_id: uuid.UUID, *, created_by: uuid.UUID | None = None
) -> list[ApiKey]:
    """The tenant's keys (only those ``created_by`` made, if given), oldest first."""
    query = select(ApiKey).where(ApiKey.tenant_id == tenant_id)
    if created_by is not None:
        query = query.where(ApiKey.created_by == created_by)
    return list(session.scalars(query.order_by(ApiKey.created_at, ApiKey.id)))


def owners_create_analyst_keys(session: Session, tenant_id: uuid.UUID) -> bool:
    """The tenant's switch: may its owner keys create analyst keys?"""
    return bool(
        session.scalar(select(Tenant.owners_create_analyst_keys).where(Tenant.id == tenant_id))
    )


def set_owners_create_analyst_keys(session: Session, tenant_id: uuid.UUID, value: bool) -> None:
    session.execute(
        update(Tenant).where(Tenant.id == tenant_id).values(owners_create_analyst_keys=value)
    )


def get_key(session: Session, tenant_id: uuid.UUID, key_id: uuid.UUID) -> ApiKey | None:
    return session.scalars(
        select(ApiKey).where(ApiKey.id == key_id, ApiKey.tenant_id == tenant_id)
    ).one_or_none()


def lock_tenant_keys(session: Session, tenant_id: uuid.UUID) -> None:
    """Serialise the changes to one tenant's keys until the transaction ends."""
    # FOR NO KEY UPDATE on the tenant row: two admins revoking each other's keys at once must
    # not both see the other key still active and leave the tenant without an admin; two
    # rotations of one key must not both make a successor. Not FOR UPDATE: that also blocks the
    # FOR KEY SHARE of every insert referencing the tenant, among them an audit entry written
    # under the chain's lock, which this transaction takes next (app/audit/repository.py): a
    # deadlock. (SQLite serialises every writer anyway.)
    session.execute(select(Tenant.id).where(Tenant.id == tenant_id).with_for_update(key_share=True))


def count_lasting_admins(
    session: Session, tenant_id: uuid.UUID, now: datetime, *, excluding: uuid.UUID
) -> int:
    """The tenant's other admin keys that work now and are not being retired by a rotation."""
    return int(
        session.scalar(
            select(func.count()).where(
                ApiKey.tenant_id == tenant_id,
                ApiKey.role == "admin",
                ApiKey.id != excluding,
                ApiKey.retires_at.is_(None),
                *usable_at(now),
            )
        )
        or 0
    )


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
