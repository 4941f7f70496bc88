"""The tenant's audit trail, exported for an auditor (admin keys; issue 27 §5)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse
from pydantic import AwareDatetime

from app.api.deps import AdminKey, DatabaseDep
from app.api.errors import error_responses
from app.audit import service
from app.audit.schemas import CSV_COLUMNS, AuditEntryOut
from engine.columns.spreadsheet import escape_cell

router = APIRouter(prefix="/v1/audit", tags=["audit"])


def _jsonl(entries: Iterator[dict[str, Any]]) -> Iterator[bytes]:
    for entry in entries:
        yield json.dumps(entry, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def _cell(entry: dict[str, Any], column: str) -> object:
    value = entry[column]
    if column == "details":
        # The canonical JSON of the details (sorted keys, no spaces), as the hash reads them.
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    if isinstance(value, str):
        # Key names are the tenant's words and request ids the client's: a cell a spreadsheet
        # would run as a formula gets a leading ' (OWASP CSV injection; as the table's CSV).
        # The chain is verified on the JSON Lines export, which keeps every value as it is.
        return escape_cell(value)
    return "" if value is None else value


def _csv(entries: Iterator[dict[str, Any]]) -> Iterator[bytes]:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(CSV_COLUMNS)
    for entry in entries:
        writer.writerow([_cell(entry, column) for column in CSV_COLUMNS])
        yield buffer.getvalue().encode()
        buffer.seek(0)
        buffer.truncate()
    if buffer.tell():
        yield buffer.getvalue().encode()


@router.get(
    "",
    response_model=None,
    responses={
        200: {
            "description": "one AuditEntryOut per line (JSON Lines), or CSV with a header row",
            "content": {
                "application/jsonl": {"schema": AuditEntryOut.model_json_schema()},
                "text/csv": {},
            },
        },
        **error_responses(401, 403, 422),
    },
)
def export_audit(
    db: DatabaseDep,
    admin: AdminKey,
    since: Annotated[AwareDatetime | None, Query(description="entries at or after")] = None,
    until: Annotated[AwareDatetime | None, Query(description="entries before")] = None,
    limit: Annotated[int | None, Query(ge=1, le=10_000_000)] = None,
    format: Annotated[Literal["jsonl", "csv"], Query()] = "jsonl",
) -> StreamingResponse:
    """The tenant's audit trail in chain order, streamed as JSON Lines or CSV (admin keys)."""
    entries = service.export_entries(
        db.factory, admin.tenant_id, since=since, until=until, limit=limit
    )
    if format == "csv":
        return StreamingResponse(
            _csv(entries),
            media_type="text/csv; charset=utf-8",
            headers={"Content-Disposition": 'attachment; filename="rhosynth-audit.csv"'},
        )
    return StreamingResponse(
        _jsonl(entries),
        media_type="application/jsonl",
        headers={"Content-Disposition": 'attachment; filename="rhosynth-audit.jsonl"'},
    )
