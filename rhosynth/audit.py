"""The audit trail's hash chain (issue 27 §5), for the server and for an auditor alike.

The server computes every entry's hash with :func:`entry_hash` and ``rhosynth audit verify``
checks a database or an exported file with :func:`verify_audit_chain`; an auditor can run the
same check on a JSON Lines export with only this module (standard library only), or re-implement
it from docs/api.md, "Audit trail".

An entry's hash is ``SHA-256(prev_hash || canonical JSON of its fields)`` in lower-case hex,
where ``prev_hash`` is the previous entry's hash (64 zeros before the tenant's first entry), as
its 64 ASCII characters, and the canonical JSON is the object of :data:`HASHED_FIELDS` with sorted
keys, no spaces, UTF-8 (non-ASCII characters unescaped).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

GENESIS_HASH = "0" * 64
"""The ``prev_hash`` of a tenant's first entry."""

HASHED_FIELDS = (
    "tenant_id",
    "seq",
    "at",
    "actor",
    "actor_name",
    "action",
    "object_type",
    "object_id",
    "request_id",
    "details",
)
"""The fields of an entry its hash covers (every field but ``prev_hash`` and ``hash``)."""


def canonical_json(fields: Mapping[str, Any]) -> bytes:
    """The canonical JSON of an entry's hashed fields: sorted keys, no spaces, UTF-8."""
    body = {name: fields[name] for name in HASHED_FIELDS}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def entry_hash(prev_hash: str, fields: Mapping[str, Any]) -> str:
    """``SHA-256(prev_hash || canonical_json(fields))`` in lower-case hex."""
    return hashlib.sha256(prev_hash.encode("ascii") + canonical_json(fields)).hexdigest()


class AuditChainBroken(Exception):
    """An entry whose ``prev_hash``, ``seq`` or ``hash`` does not follow from the one before."""

    def __init__(self, position: int, entry: Mapping[str, Any], reason: str) -> None:
        self.position = position
        self.seq = entry.get("seq")
        self.tenant_id = entry.get("tenant_id")
        self.reason = reason
        super().__init__(
            f"audit chain broken at entry {position} (tenant {self.tenant_id}, "
            f"seq {self.seq}): {reason}"
        )


@dataclass(frozen=True)
class ChainHead:
    """What a verified chain ends with, per tenant: compare it with a head noted earlier to see
    that no entry was cut off the end."""

    tenant_id: str
    entries: int
    last_seq: int
    last_hash: str


def _entry(item: str | bytes | Mapping[str, Any]) -> Mapping[str, Any]:
    if isinstance(item, Mapping):
        return item
    parsed = json.loads(item)
    if not isinstance(parsed, dict):
        raise ValueError("an audit entry is a JSON object")
    return parsed


def verify_audit_chain(
    entries: Iterable[str | bytes | Mapping[str, Any]], *, from_start: bool = True
) -> dict[str, ChainHead]:
    """Check entries in export order (JSON Lines lines or parsed objects; blank lines skipped);
    the heads of the chains checked, per tenant.

    Each tenant's entries must run ``seq`` 1, 2, 3, ... (``from_start=False``: from the first
    one given, for an export made with ``since``), each ``prev_hash`` must be the hash before it
    (64 zeros before seq 1) and each ``hash`` must be :func:`entry_hash` of the entry. Raises
    :class:`AuditChainBroken` naming the first entry that fails."""
    heads: dict[str, ChainHead] = {}
    for position, item in enumerate(entries, start=1):
        if isinstance(item, str | bytes) and not item.strip():
            continue
        entry = _entry(item)
        missing = [name for name in (*HASHED_FIELDS, "prev_hash", "hash") if name not in entry]
        if missing:
            raise AuditChainBroken(position, entry, f"missing fields: {', '.join(missing)}")
        tenant = str(entry["tenant_id"])
        head = heads.get(tenant)
        if head is None and (from_start or entry["seq"] == 1):
            expected_seq, expected_prev = 1, GENESIS_HASH
        elif head is None:
            expected_seq, expected_prev = entry["seq"], entry["prev_hash"]
        else:
            expected_seq, expected_prev = head.last_seq + 1, head.last_hash
        if entry["seq"] != expected_seq:
            raise AuditChainBroken(
                position, entry, f"seq {entry['seq']} where {expected_seq} was expected"
            )
        if entry["prev_hash"] != expected_prev:
            raise AuditChainBroken(position, entry, "prev_hash is not the previous entry's hash")
        if entry["hash"] != entry_hash(entry["prev_hash"], entry):
            raise AuditChainBroken(position, entry, "hash does not match the entry's fields")
        count = head.entries + 1 if head is not None else 1
        heads[tenant] = ChainHead(tenant, count, entry["seq"], entry["hash"])
    return heads
