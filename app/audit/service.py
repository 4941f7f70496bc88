"""Writing the audit trail, reading it back and verifying its chain (issue 27 §5).

Every privileged action calls :func:`record` in its own transaction, as the last statement of
that transaction: the entry commits with the action or rolls back with it, and the chain's lock
(repository.lock_chain) is held only from then until the commit.

Entries hold ids, names the tenant chose and public parameters only (privacy rule 6): never a
data value, a row count or anything else read from a table.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy.orm import Session, sessionmaker

from app.api.request_id import current_request_id
from app.audit import repository
from app.audit.models import AuditEntry
from app.db.base import utcnow
from app.db.session import read_only_session
from rhosynth.audit import GENESIS_HASH, AuditChainBroken, ChainHead, entry_hash, verify_audit_chain

if TYPE_CHECKING:  # app.auth.service records key changes through this module
    from app.auth.service import Principal

ACTIONS = (
    "key.create",
    "key.rotate",
    "key.revoke",
    "key.expiry",
    "key.policy",
    "dataset.create",
    "dataset.delete",
    "budget.grant",
    "quota.set",
    "quota.remove",
    "quota.policy",
    "job.submit",
    "job.approve",
    "job.reject",
    "job.expire",
    "job.cancel",
    "job.download",
    "sample.create",
    "sample.delete",
    "sample.download",
    "webhook.create",
    "webhook.rotate_secret",
    "webhook.replay",
    "webhook.delete",
)
"""Every action the trail records (docs/api.md, "Audit trail", says what each one's details are)."""

CLI_ACTOR = "cli"
"""The actor of a key made on the server's shell (``rhosynth keys create``)."""

SYSTEM_ACTOR = "system"
"""The actor of the service's own decisions that the trail records (a pending job expiring)."""

DetailValue = str | int | bool | None | list[str]


def _checked(details: Mapping[str, DetailValue]) -> dict[str, Any]:
    # Strings, integers, booleans and lists of strings have one canonical JSON form each (a
    # float would not: its text may differ between writers), so the hash can be recomputed
    # from any export. Decimals (ρ) are given as strings.
    for name, value in details.items():
        if isinstance(value, list):
            if not all(isinstance(item, str) for item in value):
                raise TypeError(f"audit detail {name!r}: lists hold strings only")
        elif value is not None and not isinstance(value, str | int | bool):
            raise TypeError(f"audit detail {name!r}: {type(value).__name__} is not allowed")
    return dict(details)


def text_of(value: datetime | uuid.UUID | object | None) -> str | None:
    """A detail's text: instants in ISO 8601 UTC, anything else as ``str`` (None stays None)."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return at_text(value)
    return str(value)


def at_text(at: datetime) -> str:
    """An instant as the trail writes it: ISO 8601 in UTC with microseconds."""
    return at.astimezone(UTC).isoformat(timespec="microseconds")


def record_as(
    session: Session,
    tenant_id: uuid.UUID,
    actor: str,
    actor_name: str | None,
    action: str,
    object_type: str,
    object_id: uuid.UUID | str,
    details: Mapping[str, DetailValue] | None = None,
) -> AuditEntry:
    """Append an entry to the tenant's chain in ``session``'s transaction. Flushes."""
    if action not in ACTIONS:
        raise ValueError(f"unknown audit action {action!r}")
    body = _checked(details or {})
    repository.lock_chain(session, tenant_id)
    last = repository.last_entry(session, tenant_id)
    seq, prev_hash = (1, GENESIS_HASH) if last is None else (last[0] + 1, last[1])
    entry = AuditEntry(
        tenant_id=tenant_id,
        seq=seq,
        at=utcnow(),
        actor=actor,
        actor_name=actor_name,
        action=action,
        object_type=object_type,
        object_id=str(object_id),
        request_id=current_request_id(),
        details=body,
        prev_hash=prev_hash,
        hash="",
    )
    entry.hash = entry_hash(prev_hash, entry_fields(entry))
    return repository.add(session, entry)


def record(
    session: Session,
    principal: Principal,
    action: str,
    object_type: str,
    object_id: uuid.UUID | str,
    details: Mapping[str, DetailValue] | None = None,
) -> AuditEntry:
    """Append an entry for ``principal``'s action to its tenant's chain, in the action's own
    transaction (call it last in that transaction). Flushes."""
    return record_as(
        session,
        principal.tenant_id,
        principal.actor,
        principal.name,
        action,
        object_type,
        object_id,
        details,
    )


def entry_fields(entry: AuditEntry) -> dict[str, Any]:
    """An entry as the export writes it (and as its hash covers it, less the two hashes)."""
    return {
        "tenant_id": str(entry.tenant_id),
        "seq": entry.seq,
        "at": at_text(entry.at),
        "actor": entry.actor,
        "actor_name": entry.actor_name,
        "action": entry.action,
        "object_type": entry.object_type,
        "object_id": entry.object_id,
        "request_id": entry.request_id,
        "details": entry.details,
        "prev_hash": entry.prev_hash,
        "hash": entry.hash,
    }


EXPORT_PAGE = 500
"""Entries read per short read-only transaction while an export streams."""


def export_entries(
    factory: sessionmaker[Session],
    tenant_id: uuid.UUID,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    limit: int | None = None,
    page_size: int | None = None,
) -> Iterator[dict[str, Any]]:
    """The tenant's entries in chain order, read a page at a time, each page in a transaction of
    its own (keyset pagination on seq), so no transaction stays open while the client reads."""
    after = 0
    left = limit
    page = page_size or EXPORT_PAGE
    while left is None or left > 0:
        size = page if left is None else min(page, left)
        with read_only_session(factory) as session:
            rows = repository.page(
                session, tenant_id, after_seq=after, since=since, until=until, limit=size
            )
            fields = [entry_fields(row) for row in rows]
        yield from fields
        if len(fields) < size:
            return
        after = fields[-1]["seq"]
        if left is not None:
            left -= len(fields)


def latest_entries(
    session: Session,
    tenant_id: uuid.UUID,
    *,
    before_seq: int | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    limit: int = 50,
) -> list[dict[str, Any]]:
    """One page of the tenant's entries, newest first (the console's table; keyset pagination
    on seq: the next page is ``before_seq`` = the last seq shown), as the export writes them."""
    rows = repository.latest(
        session, tenant_id, before_seq=before_seq, since=since, until=until, limit=limit
    )
    return [entry_fields(row) for row in rows]


def verify_tenant(factory: sessionmaker[Session], tenant_id: uuid.UUID) -> ChainHead | None:
    """Verify the tenant's whole chain in the database; its head (None: no entries). Raises
    :class:`rhosynth.audit.AuditChainBroken` at the first entry that does not follow."""
    heads = verify_audit_chain(export_entries(factory, tenant_id))
    return heads.get(str(tenant_id))


def audited_tenants(factory: sessionmaker[Session]) -> Sequence[uuid.UUID]:
    """Every tenant with an audit entry."""
    with read_only_session(factory) as session:
        return repository.tenant_ids(session)


def find_tenant(factory: sessionmaker[Session], reference: str) -> uuid.UUID | None:
    """The id of the tenant named ``reference``, or whose id it is."""
    try:
        tenant_id: uuid.UUID | None = uuid.UUID(reference)
    except ValueError:
        tenant_id = None
    with read_only_session(factory) as session:
        return repository.find_tenant(session, reference, tenant_id)


__all__ = [
    "ACTIONS",
    "AuditChainBroken",
    "ChainHead",
    "audited_tenants",
    "entry_fields",
    "export_entries",
    "find_tenant",
    "latest_entries",
    "record",
    "record_as",
    "verify_tenant",
]
