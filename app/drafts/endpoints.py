"""Schema drafts: an owner sends a file and gets a proposed schema back; nothing is stored."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile

from app.api.deps import OwnerKey, SettingsDep, StorageDep
from app.api.errors import error_responses
from app.api.uploads import UploadSlots, spooled_file, storage_unavailable
from app.datasets.ingest import UploadRejected
from app.drafts import service
from app.drafts.schemas import SchemaDraftOut

logger = logging.getLogger(__name__)

router = APIRouter(
    prefix="/v1/schema-drafts",
    tags=["datasets"],
    responses=error_responses(400, 401, 403, 413, 415, 422, 503),
)

_DRAFT_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    "properties": {
                        "file": {
                            "type": "string",
                            "format": "binary",
                            "description": "the table: CSV (UTF-8, header row) or Parquet",
                        },
                        "missing_values": {
                            "type": "string",
                            "description": "JSON list of the spellings of a missing cell",
                        },
                        "show_values": {
                            "type": "string",
                            "enum": ["true", "false"],
                            "description": "propose the data's own categories and bounds",
                        },
                    },
                }
            }
        },
    }
}


@router.post("", response_model=SchemaDraftOut, openapi_extra=_DRAFT_BODY)
async def create_draft(
    request: Request, settings: SettingsDep, storage: StorageDep, principal: OwnerKey
) -> SchemaDraftOut:
    """Propose a schema for a raw table (owner keys). The file is read and deleted; nothing is
    stored and no budget is spent. A draft accepted as is publishes no value of the file."""
    del principal  # owners only; the draft is returned to the caller and kept nowhere
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise HTTPException(415, "send multipart/form-data with a file field named 'file'")
    try:
        async with request.form(
            max_files=1, max_fields=5, max_part_size=settings.max_schema_bytes
        ) as form:
            upload = form.get("file")
            if not isinstance(upload, UploadFile):
                raise UploadRejected(422, "the form needs a file field named 'file'")
            missing_field = form.get("missing_values")
            show_field = form.get("show_values", "false")
            if not isinstance(show_field, str) or show_field not in ("true", "false"):
                raise UploadRejected(422, "show_values must be true or false")
            missing_values = service.parse_missing_values(
                missing_field if isinstance(missing_field, str) else None
            )
            slots: UploadSlots = request.app.state.upload_slots
            with slots.hold():  # 503 + Retry-After when the process's upload budget is full
                async with spooled_file(storage, upload, ".draft") as spooled:
                    # The draft stops between batches once the client has left.
                    left = threading.Event()
                    watcher = asyncio.create_task(_watch_disconnect(request, left))
                    try:
                        return await run_in_threadpool(
                            service.draft_for_upload,
                            spooled,
                            settings,
                            missing_values=missing_values,
                            show_values=show_field == "true",
                            stop=left.is_set,
                        )
                    finally:
                        watcher.cancel()
    except UploadRejected as rejected:
        raise HTTPException(rejected.status_code, rejected.message) from None
    except OSError as error:
        raise storage_unavailable("schema draft", error) from None


async def _watch_disconnect(request: Request, left: threading.Event) -> None:
    """Set ``left`` when the client disconnects (polled twice a second)."""
    while not await request.is_disconnected():
        await asyncio.sleep(0.5)
    left.set()
