"""All SQL for the audit trail."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from app.audit.models import AuditEntry
from app.auth.models import Tenant


def _lock_id(tenant_id: uuid.UUID) -> int:
    """A signed 64-bit advisory-lock id for the tenant's chain (a collision only serialises two
    tenants' appends, it breaks nothing)."""
    digest = hashlib.sha256(b"rhosynth-audit:" + tenant_id.bytes).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def lock_chain(session: Session, tenant_id: uuid.UUID) -> None:
    """Serialise appends to the tenant's chain until the transaction ends.

    Race: two requests of one tenant that each read the same last entry would both chain onto
    its hash (a fork: two entries with one prev_hash and one seq; the unique (tenant_id, seq)
    would then fail the second request). pg_advisory_xact_lock rather than a row lock on the
    tenant: the actions recorded insert rows that reference the tenant (FOR KEY SHARE), and two
    of them upgrading to a row lock on it would deadlock. Appends are the last statement of
    their action's transaction, so no lock is taken after this one. SQLite (embedded mode):
    every write transaction begins IMMEDIATE, so writers are serialised already.
    """
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": _lock_id(tenant_id)})


def last_entry(session: Session, tenant_id: uuid.UUID) -> tuple[int, str] | None:
    """(seq, hash) of the tenant's last entry, or None before its first."""
    row = session.execute(
        select(AuditEntry.seq, AuditEntry.hash)
        .where(AuditEntry.tenant_id == tenant_id)
        .order_by(AuditEntry.seq.desc())
        .limit(1)
    ).first()
    return None if row is None else (row.seq, row.hash)


def add(session: Session, entry: AuditEntry) -> AuditEntry:
    session.add(entry)
    session.flush()
    return entry


def page(
    session: Session,
    tenant_id: uuid.UUID,
    *,
    after_seq: int,
    since: datetime | None,
    until: datetime | None,
    limit: int,
) -> Sequence[AuditEntry]:
    """The tenant's entries after ``after_seq`` in chain order (keyset pagination)."""
    query = select(AuditEntry).where(AuditEntry.tenant_id == tenant_id, AuditEntry.seq > after_seq)
    if since is not None:
        query = query.where(AuditEntry.at >= since)
    if until is not None:
        query = query.where(AuditEntry.at < until)
    return session.scalars(query.order_by(AuditEntry.seq).limit(limit)).all()


def latest(
    session: Session,
    tenant_id: uuid.UUID,
    *,
    before_seq: int | None,
    since: datetime | None,
    until: datetime | None,
    limit: int,
) -> Sequence[AuditEntry]:
    """The tenant's entries before ``before_seq`` (None: from the last), newest first."""
    query = select(AuditEntry).where(AuditEntry.tenant_id == tenant_id)
    if before_seq is not None:
        query = query.where(AuditEntry.seq < before_seq)
    if since is not None:
        query = query.where(AuditEntry.at >= since)
    if until is not None:
        query = query.where(AuditEntry.at < until)
    return session.scalars(query.order_by(AuditEntry.seq.desc()).limit(limit)).all()


def tenant_ids(session: Session) -> list[uuid.UUID]:
    """Every tenant with an audit entry."""
    return list(session.scalars(select(AuditEntry.tenant_id).distinct()))


def find_tenant(session: Session, name: str, tenant_id: uuid.UUID | None) -> uuid.UUID | None:
    """The tenant with this id (if given) or else this name."""
    if tenant_id is not None:
        found = session.scalar(select(Tenant.id).where(Tenant.id == tenant_id))
        if found is not None:
            return found
    return session.scalar(select(Tenant.id).where(Tenant.name == name))
