"""Multipart uploads: spooling the file to storage's temporary area, the storage 503, and the
process's upload memory budget."""

from __future__ import annotations

import contextlib
import logging
import shutil
import threading
from collections.abc import AsyncIterator, Iterator
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


UPLOAD_MEMORY_MB = 512
"""What one upload or draft may add to the API process's resident memory (docs/operations.md,
"Upload memory"; tests/app/test_upload_memory.py asserts it for one upload)."""


class UploadSlots:
    """The API process's upload memory budget (issue 24 §8): ``budget_mb`` //
    :data:`UPLOAD_MEMORY_MB` uploads and drafts may read and encode at once; one more is answered
    503 with Retry-After instead of multiplying the memory bound (six at once took a process to
    +1.28 GB). Non-blocking, thread-safe."""

    def __init__(self, budget_mb: int) -> None:
        self.slots = max(1, budget_mb // UPLOAD_MEMORY_MB)
        self._semaphore = threading.BoundedSemaphore(self.slots)

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        if not self._semaphore.acquire(blocking=False):
            raise HTTPException(
                status.HTTP_503_SERVICE_UNAVAILABLE,
                f"this server is reading {self.slots} upload(s) already (its upload memory "
                "budget); retry after the Retry-After delay",
                headers={"Retry-After": "5"},
            )
        try:
            yield
        finally:
            self._semaphore.release()
