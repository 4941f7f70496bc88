"""The file a console draft read, kept for the upload that follows (issue 26 §1).

A browser cannot keep a chosen file across a page load, so the console's draft round trip used to
clear it and the owner had to choose the same file again before uploading. Now the draft action
stores the file it read under ``console-drafts/<key id>/<token>`` (the service's own storage, as
uploads are) and the form carries the random token; an upload sent without a new file uses the
kept one. The file is the owner's own upload, kept only for that owner key, never read by a
mechanism and never served:

* it is usable for :data:`CONSOLE_DRAFT_TTL_SECONDS` (one hour) after the draft, removed at the
  upload that uses it, when a newer draft replaces it, and otherwise by the storage sweep
  (app/jobs/sweep.py);
* a key keeps at most :data:`MAX_KEPT` such files (older ones are removed at each draft), so
  repeated drafts cannot fill the storage beyond a few uploads' worth;
* the token is 128 random bits and the key id is part of the path, so another key (another tenant
  or a colleague) cannot name the file.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from app.storage import (
    CONSOLE_DRAFT_TTL_SECONDS,
    ObjectMissing,
    Storage,
    console_draft_prefix,
)

MAX_KEPT = 3
"""Kept draft files per owner key (the newest ones)."""

_TOKEN = re.compile(r"[0-9a-f]{32}")


class StagedFileGone(Exception):
    """The kept file is missing or older than its time to live: the owner chooses it again."""


def _key(key_id: uuid.UUID, token: str) -> str:
    return f"{console_draft_prefix(key_id)}/{token}"


def valid_token(text: str | None) -> str | None:
    """``text`` if it has the form of a token this module hands out, else None."""
    return text if text is not None and _TOKEN.fullmatch(text) else None


def keep(storage: Storage, key_id: uuid.UUID, source: BinaryIO) -> str:
    """Store ``source`` (read from its start) for ``key_id``'s next upload; returns its token.

    Blocking (a copy of the whole file): call it in a thread."""
    token = uuid.uuid4().hex
    local = storage.temp_path(".draft-kept")
    try:
        source.seek(0)
        with open(local, "wb") as handle:
            shutil.copyfileobj(source, handle, length=1024 * 1024)
        storage.put_file(local, _key(key_id, token))
    finally:
        local.unlink(missing_ok=True)
        source.seek(0)
    kept = sorted(
        storage.list_objects(console_draft_prefix(key_id)),
        key=lambda stored: stored.modified,
        reverse=True,
    )
    for stored in kept[MAX_KEPT:]:
        storage.delete(stored.key)
    return token


@contextlib.contextmanager
def kept_copy(
    storage: Storage, key_id: uuid.UUID, token: str, now: float | None = None
) -> Iterator[Path]:
    """A local path holding the kept file (blocking). Raises :class:`StagedFileGone` when it is
    missing or older than :data:`CONSOLE_DRAFT_TTL_SECONDS`."""
    key = _key(key_id, token)
    now = time.time() if now is None else now
    listed = [s for s in storage.list_objects(console_draft_prefix(key_id)) if s.key == key]
    if not listed or now - listed[0].modified > CONSOLE_DRAFT_TTL_SECONDS:
        raise StagedFileGone(key)
    try:
        with storage.local_copy(key) as path:
            yield path
    except ObjectMissing:
        raise StagedFileGone(key) from None


def drop(storage: Storage, key_id: uuid.UUID, token: str) -> None:
    """Remove a kept file (best effort: the sweep removes what is left)."""
    with contextlib.suppress(OSError):
        storage.delete(_key(key_id, token))
