"""Creating and managing keys, and resolving a bearer key to a principal.

Roles: ``owner`` (everything on the tenant's data), ``analyst`` (reads datasets, submits jobs,
reads releases) and ``admin`` (manages the tenant's keys over ``/v1/keys`` and nothing else: an
admin key sees no dataset, so a key-management portal holding it cannot read data or spend a
budget itself; it can create owner keys, so it is as sensitive as one). If an admin turns on
the tenant's ``owners_create_analyst_keys`` switch, owner keys create analyst keys limited to
datasets they see, and list, rotate and revoke only the keys they created
(``api_keys.created_by``). Issue 27 §1.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from app.audit import service as audit
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
    # The datasets this key may see: None for every dataset of the tenant; a dataset-limited
    # key's list; empty for admin keys (they manage keys, not data). Every dataset-scoped read
    # goes through the repositories' *_for_tenant functions, which apply it.
    datasets: frozenset[uuid.UUID] | None = None

    @property
    def is_owner(self) -> bool:
        return self.role == "owner"

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

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
    audit.record_as(
        session,
        tenant.id,
        audit.CLI_ACTOR,
        None,
        "key.create",
        "key",
        row.id,
        {"name": name, "role": role, "expires_at": None, "datasets": []},
    )
    return CreatedKey(key=key, key_id=row.id, tenant_id=tenant.id, role=role)


def principal_of(key: ApiKey, datasets: frozenset[uuid.UUID]) -> Principal:
    """The principal of a usable key limited to ``datasets`` (empty: not limited)."""
    scope: frozenset[uuid.UUID] | None = frozenset() if key.role == "admin" else datasets or None
    return Principal(
        key_id=key.id, tenant_id=key.tenant_id, role=key.role, name=key.name, datasets=scope
    )


def authenticate(session: Session, secret: bytes, presented: str) -> Principal | None:
    """The principal for a presented key, or None (unknown, revoked, expired or retired by a
    rotation). Lookup is by HMAC, so timing reveals nothing."""
    found = repository.find_active_key(session, hash_key(secret, presented), utcnow())
    if found is None:
        return None
    return principal_of(*found)


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


MAX_OVERLAP = timedelta(days=7)
"""The longest a rotated key's old secret keeps working."""


class KeyNotFound(LookupError):
    """No such key in the caller's tenant (another tenant's key too: its existence is not told)."""


class KeyConflict(Exception):
    """The key's state does not allow this (revoked, retiring, the tenant's last admin key)."""


class KeysForbidden(PermissionError):
    """An owner key asking for what owners may not do with keys (the switch is off, or a role
    other than analyst)."""


OWNER_SWITCH = "owners_create_analyst_keys"
"""The tenant's switch (set by admins) that lets owner keys create analyst keys."""


class InvalidKeyRequest(ValueError):
    """A request that names another tenant's dataset, gives an admin key datasets, or an expiry
    that has passed."""


@dataclass(frozen=True)
class KeyView:
    """A key's public fields (never its hash) and its dataset limits."""

    key: ApiKey
    datasets: list[uuid.UUID]


def _check_name(name: str) -> str:
    name = name.strip()
    if not name or len(name) > 200:
        raise InvalidKeyRequest("key names are 1 to 200 characters")
    return name


def _check_expiry(expires_at: datetime | None, now: datetime) -> None:
    if expires_at is not None and expires_at <= now:
        raise InvalidKeyRequest("expires_at must be in the future (revoke a key to end it now)")


def _new_key(
    session: Session,
    secret: bytes,
    tenant_id: uuid.UUID,
    *,
    role: str,
    name: str,
    expires_at: datetime | None,
    datasets: Sequence[uuid.UUID],
    now: datetime,
    created_by: uuid.UUID | None,
) -> tuple[str, KeyView]:
    key = generate_key()
    row = repository.add_key(
        session,
        ApiKey(
            id=uuid.uuid4(),
            tenant_id=tenant_id,
            name=name,
            role=role,
            key_hash=hash_key(secret, key),
            prefix=display_prefix(key),
            created_at=now,
            expires_at=expires_at,
            created_by=created_by,
        ),
    )
    limits = sorted(set(datasets))
    if limits:
        repository.limit_key_to(session, row.id, limits)
    return key, KeyView(row, limits)


def _check_owner_allowed(session: Session, caller: Principal) -> uuid.UUID | None:
    """None for an admin key (every key of its tenant); for an owner key, its id (it manages
    only the keys it created) if the tenant's switch is on, else KeysForbidden. A change takes
    the tenant's key lock before this check: an admin turning the switch off
    (set_key_policy, under the same lock) waits for an owner's key change in flight, which
    must not land after the switch is off."""
    if not caller.is_owner:
        return None
    if not repository.owners_create_analyst_keys(session, caller.tenant_id):
        raise KeysForbidden(
            f"owner keys manage keys only if an admin turns on {OWNER_SWITCH} "
            "(PUT /v1/keys/policy); otherwise this action needs an admin key"
        )
    return caller.key_id


def create_tenant_key(
    session: Session,
    secret: bytes,
    admin: Principal,
    *,
    role: str,
    name: str,
    expires_at: datetime | None,
    datasets: Sequence[uuid.UUID],
) -> tuple[str, KeyView]:
    """A new key of the caller's tenant: (the secret, shown once; its view). An admin key makes
    any key; an owner key (the switch on) only analyst keys limited to datasets it sees.
    Flushes."""
    if role not in ROLES:
        raise InvalidKeyRequest(f"role must be one of {', '.join(ROLES)}")
    if admin.is_owner:
        repository.lock_tenant_keys(session, admin.tenant_id)
    created_by = _check_owner_allowed(session, admin)
    if created_by is not None:
        if role != "analyst":
            raise KeysForbidden("owner keys create analyst keys only")
        if not datasets:
            raise InvalidKeyRequest(
                "an owner's analyst keys are limited to some of its datasets: give datasets"
            )
    now = utcnow()
    _check_expiry(expires_at, now)
    if datasets and role == "admin":
        raise InvalidKeyRequest("admin keys see no dataset; they cannot be limited to some")
    unknown = set(datasets) - repository.tenant_dataset_ids(session, admin.tenant_id, datasets)
    if admin.datasets is not None and created_by is not None:
        # A dataset-limited owner key gives only what it sees itself.
        unknown |= set(datasets) - admin.datasets
    if unknown:
        # The same answer for another tenant's dataset and for none at all.
        raise InvalidKeyRequest(f"no such dataset: {sorted(unknown)[0]}")
    created = _new_key(
        session,
        secret,
        admin.tenant_id,
        role=role,
        name=_check_name(name),
        expires_at=expires_at,
        datasets=datasets,
        now=now,
        created_by=created_by,
    )
    view = created[1]
    audit.record(
        session,
        admin,
        "key.create",
        "key",
        view.key.id,
        {
            "name": view.key.name,
            "role": role,
            "expires_at": audit.text_of(expires_at),
            "datasets": [str(d) for d in view.datasets],
        },
    )
    return created


def list_tenant_keys(session: Session, admin: Principal) -> list[KeyView]:
    """Every key of the tenant (an owner key: those it created), revoked and expired ones too,
    oldest first."""
    keys = repository.list_keys(
        session, admin.tenant_id, created_by=_check_owner_allowed(session, admin)
    )
    limits = repository.datasets_of_keys(session, (k.id for k in keys))
    return [KeyView(k, limits.get(k.id, [])) for k in keys]


def _visible(key: ApiKey | None, created_by: uuid.UUID | None) -> ApiKey | None:
    """The key, unless the caller is an owner key that did not create it."""
    if key is None or (created_by is not None and key.created_by != created_by):
        return None
    return key


def get_tenant_key(session: Session, admin: Principal, key_id: uuid.UUID) -> KeyView:
    created_by = _check_owner_allowed(session, admin)
    key = _visible(repository.get_key(session, admin.tenant_id, key_id), created_by)
    if key is None:
        raise KeyNotFound(key_id)
    return KeyView(key, sorted(repository.key_datasets(session, key.id)))


def _locked_key(session: Session, admin: Principal, key_id: uuid.UUID) -> ApiKey:
    repository.lock_tenant_keys(session, admin.tenant_id)
    created_by = _check_owner_allowed(session, admin)
    key = _visible(repository.get_key(session, admin.tenant_id, key_id), created_by)
    if key is None:
        raise KeyNotFound(key_id)
    return key


def rotate_key(
    session: Session, secret: bytes, admin: Principal, key_id: uuid.UUID, overlap: timedelta
) -> tuple[str, KeyView]:
    """A successor of a usable key (same name, role, datasets and expiry; a new secret, shown
    once); the old key keeps working until now + ``overlap``, then stops. Flushes."""
    if overlap < timedelta(0) or overlap > MAX_OVERLAP:
        raise InvalidKeyRequest("the overlap is 0 s to 7 days")
    key = _locked_key(session, admin, key_id)
    now = utcnow()
    if key.revoked_at is not None:
        raise KeyConflict("a revoked key cannot be rotated")
    if key.expires_at is not None and key.expires_at <= now:
        raise KeyConflict("an expired key cannot be rotated")
    if key.retires_at is not None:
        raise KeyConflict("the key has already been rotated; rotate its successor")
    created = _new_key(
        session,
        secret,
        key.tenant_id,
        role=key.role,
        name=key.name,
        expires_at=key.expires_at,
        datasets=sorted(repository.key_datasets(session, key.id)),
        now=now,
        created_by=key.created_by,  # an owner manages the successors of its keys too
    )
    key.retires_at = now + overlap
    session.flush()
    audit.record(
        session,
        admin,
        "key.rotate",
        "key",
        key.id,
        {"successor_id": str(created[1].key.id), "retires_at": audit.text_of(key.retires_at)},
    )
    return created


def revoke_key(session: Session, admin: Principal, key_id: uuid.UUID) -> KeyView:
    """Revoke a key at once (idempotent). The tenant's last active admin key (working, and not
    being retired by a rotation) is kept: without it the tenant could only get keys again from
    a shell on the server. Flushes."""
    key = _locked_key(session, admin, key_id)
    if key.revoked_at is None:
        now = utcnow()
        if (
            key.role == "admin"
            and repository.count_lasting_admins(session, key.tenant_id, now, excluding=key.id) == 0
        ):
            raise KeyConflict("this is the tenant's last active admin key; create another first")
        key.revoked_at = now
        session.flush()
        audit.record(session, admin, "key.revoke", "key", key.id)
    return KeyView(key, sorted(repository.key_datasets(session, key.id)))


def set_key_expiry(
    session: Session, admin: Principal, key_id: uuid.UUID, expires_at: datetime | None
) -> KeyView:
    """Set (a future instant) or clear (None) a key's expiry. Flushes."""
    key = _locked_key(session, admin, key_id)
    _check_expiry(expires_at, utcnow())
    if key.revoked_at is not None:
        raise KeyConflict("a revoked key cannot change")
    key.expires_at = expires_at
    session.flush()
    audit.record(
        session, admin, "key.expiry", "key", key.id, {"expires_at": audit.text_of(expires_at)}
    )
    return KeyView(key, sorted(repository.key_datasets(session, key.id)))


def get_key_policy(session: Session, admin: Principal) -> bool:
    """The tenant's switch: may owner keys create analyst keys?"""
    return repository.owners_create_analyst_keys(session, admin.tenant_id)


def set_key_policy(session: Session, admin: Principal, owners_create_analyst_keys: bool) -> bool:
    """Turn the switch on or off (an admin key). Flushes."""
    # The tenant's key lock: an owner's key change in flight (which read the switch under the
    # same lock) finishes before the switch changes.
    repository.lock_tenant_keys(session, admin.tenant_id)
    repository.set_owners_create_analyst_keys(session, admin.tenant_id, owners_create_analyst_keys)
    session.flush()
    audit.record(
        session,
        admin,
        "key.policy",
        "tenant",
        admin.tenant_id,
        {OWNER_SWITCH: owners_create_analyst_keys},
    )
    return owners_create_analyst_keys
