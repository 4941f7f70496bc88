"""Creating keys and resolving a bearer key to a principal."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy.orm import Session

from app.auth import repository
from app.auth.keys import display_prefix, generate_key, hash_key
from app.auth.models import ROLES, ApiKey
from app.db.base import utcnow


@dataclass(frozen=True)
class Principal:
    """Who is calling: the key, its tenant and its role."""

    key_id: uuid.UUID
    tenant_id: uuid.UUID
    role: str
    name: str

    @property
    def is_owner(self) -> bool:
        return self.role == "owner"

    @property
    def actor(self) -> str:
        """How the ledger records this caller."""
        return f"key:{self.key_id}"


@dataclass(frozen=True)
class CreatedKey:
    key: str
    key_id: uuid.UUID
    tenant_id: uuid.UUID
    role: str


def create_key(
    session: Session, secret: bytes, tenant_name: str, role: str, name: str
) -> CreatedKey:
    """Create a key for ``tenant_name`` (creating the tenant on first use). Flushes, no commit."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}")
    tenant_name = tenant_name.strip()
    name = name.strip()
    if not tenant_name or len(tenant_name) > 200:
        raise ValueError("tenant names are 1 to 200 characters")
    if not name or len(name) > 200:
        raise ValueError("key names are 1 to 200 characters")
    tenant = repository.get_or_create_tenant(session, tenant_name)
    key = generate_key()
    row = repository.add_key(
        session,
        ApiKey(
            id=uuid.uuid4(),
            tenant_id=tenant.id,
            name=name,
            role=role,
            key_hash=hash_key(secret, key),
            prefix=display_prefix(key),
            created_at=utcnow(),
        ),
    )
    return CreatedKey(key=key, key_id=row.id, tenant_id=tenant.id, role=role)


def authenticate(session: Session, secret: bytes, presented: str) -> Principal | None:
    """The principal for a presented key, or None. Lookup is by HMAC, so timing reveals nothing."""
    row = repository.find_active_key(session, hash_key(secret, presented))
    if row is None:
        return None
    return Principal(key_id=row.id, tenant_id=row.tenant_id, role=row.role, name=row.name)


def actor_names(session: Session, tenant_id: uuid.UUID, actors: Iterable[str]) -> dict[str, str]:
    """Ledger actors (``key:<id>``, Principal.actor) of the tenant's keys → the keys' names.
    Other actors (the worker, the service) and other tenants' keys are left out."""
    ids: set[uuid.UUID] = set()
    for actor in actors:
        prefix, _, rest = actor.partition(":")
        if prefix == "key":
            try:
                ids.add(uuid.UUID(rest))
            except ValueError:
                continue
    names = repository.key_names(session, tenant_id, ids)
    return {f"key:{key_id}": name for key_id, name in names.items()}
