"""Wire types of the audit export (one JSON object per line; the CSV has the same columns)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field


class AuditEntryOut(BaseModel):
    """One entry of the tenant's audit trail (docs/api.md, "Audit trail")."""

    tenant_id: uuid.UUID
    seq: int = Field(description="1, 2, 3, ... within the tenant: the chain's order")
    at: datetime = Field(description="when the action committed its entry (UTC)")
    actor: str = Field(description="the key that acted: key:<id> (cli: the server's shell)")
    actor_name: str | None = Field(description="that key's name when it acted")
    action: str = Field(description="e.g. key.create, dataset.create, job.submit, job.download")
    object_type: str = Field(description="key, dataset, job or sample")
    object_id: str
    request_id: str | None = Field(description="the request's X-Request-ID")
    details: dict[str, Any] = Field(description="ids, names and public parameters only")
    prev_hash: str = Field(description="the previous entry's hash (64 zeros before seq 1)")
    hash: str = Field(description="SHA-256(prev_hash || canonical JSON of the fields above)")


CSV_COLUMNS = tuple(AuditEntryOut.model_fields)
"""The CSV export's columns, in order (``details`` as its canonical JSON text)."""
