"""Multipart uploads: spooling the file to storage's temporary area, and the storage 503."""

from __future__ import annotations

import contextlib
import logging
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

from fastapi import HTTPException, status
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile

from app.storage import Storage

logger = logging.getLogger(__name__)


def copy_upload(upload: UploadFile, target: Path) -> None:
    """Spool a parsed multipart file to ``target`` (blocking: call it in a thread)."""
    upload.file.seek(0)
    with open(target, "wb") as handle:
        shutil.copyfileobj(upload.file, handle, length=1024 * 1024)


@contextlib.asynccontextmanager
async def spooled_file(storage: Storage, upload: UploadFile, suffix: str) -> AsyncIterator[Path]:
    """The upload copied to a fresh temporary path (off the event loop), removed afterwards."""
    path = await run_in_threadpool(storage.temp_path, suffix)
    try:
        await run_in_threadpool(copy_upload, upload, path)
        yield path
    finally:
        path.unlink(missing_ok=True)


def storage_unavailable(what: str, error: OSError) -> HTTPException:
    """The 503 for storage that cannot be written (permissions, a full disk, a missing mount, an
    object store that is unreachable or refuses the request): the operator gets the cause in the
    log, the caller a retryable answer."""
    logger.error("%s: storage is not writable: %s", what, error, exc_info=True)
    return HTTPException(
        status.HTTP_503_SERVICE_UNAVAILABLE,
        "the service cannot store uploads right now; retry later",
        headers={"Retry-After": "60"},
    )
