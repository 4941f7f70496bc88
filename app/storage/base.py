"""What every storage backend offers: keyed objects written once, read as streams or local
copies, erased by prefix, and listed with their modification times for the sweep.

Keys are relative paths (``datasets/<id>/table.parquet``); a key never starts with ``/`` and has
no ``..`` part. A *prefix* names a folder of keys: ``delete_tree`` and ``list_objects`` act on
the object named exactly ``prefix`` and on every key below ``prefix/`` (never on a sibling that
merely starts with the same text: ``outputs/<job>/attempt-1`` is not
``outputs/<job>/attempt-1.parquet``).

Errors: a missing object raises ObjectMissing (a FileNotFoundError); a store that cannot be
reached or refuses the request raises StorageUnavailable (an OSError). The API answers both kinds
of OSError from storage as it answers a full disk: 503 with Retry-After.
"""

from __future__ import annotations

import abc
import contextlib
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

# HTTP downloads read stored objects in blocks of this size.
DEFAULT_CHUNK_BYTES = 1024 * 1024


class StorageUnavailable(OSError):
    """The object store could not be reached, or refused the request (credentials, policy)."""


class ObjectMissing(FileNotFoundError):
    """No object is stored under the key."""


@dataclass(frozen=True)
class StoredObject:
    """One stored object as a listing sees it."""

    key: str
    size: int
    modified: float  # seconds since the epoch (a file's mtime, an object's LastModified)


def check_key(key: str) -> str:
    """``key`` if it is a relative path below the storage root, else ValueError."""
    path = PurePosixPath(key)
    escapes = any(part in ("..", ".") for part in path.parts)
    if not key or key.startswith("/") or "\\" in key or escapes:
        raise ValueError("storage key escapes the storage root")
    if str(path) != key:
        raise ValueError("storage key is not in normal form")
    return key


class Storage(abc.ABC):
    """The operations the service needs of its storage (app/storage/local.py, s3.py)."""

    @abc.abstractmethod
    def temp_path(self, suffix: str = "") -> Path:
        """A fresh local path for a file being written before it is published with put_file
        (and for spooled uploads). The caller removes it when done with it."""

    @abc.abstractmethod
    def put_file(self, local: Path, key: str) -> None:
        """Publish the finished local file ``local`` under ``key``, all at once: a reader sees
        the whole object or none. The local file may be consumed (moved); callers unlink it
        afterwards with ``missing_ok=True``. Never holds the whole file in memory."""

    @abc.abstractmethod
    def local_copy(self, key: str) -> contextlib.AbstractContextManager[Path]:
        """A local file with the object's bytes for the duration of the block (the stored file
        itself, or a streamed download removed afterwards). Read it; never write it."""

    @abc.abstractmethod
    def iter_bytes(self, key: str, chunk: int = DEFAULT_CHUNK_BYTES) -> Iterator[bytes]:
        """The object's bytes in blocks of at most ``chunk`` bytes. ObjectMissing is raised by
        this call (before any byte) if there is none."""

    @abc.abstractmethod
    def size(self, key: str) -> int:
        """The object's size in bytes; ObjectMissing if there is none."""

    def exists(self, key: str) -> bool:
        try:
            self.size(key)
        except ObjectMissing:
            return False
        return True

    @abc.abstractmethod
    def delete(self, key: str) -> None:
        """Remove one object (nothing if there is none)."""

    @abc.abstractmethod
    def delete_tree(self, prefix: str) -> None:
        """Erase the object ``prefix`` and everything under ``prefix/``."""

    @abc.abstractmethod
    def list_objects(self, prefix: str) -> Iterator[StoredObject]:
        """Every object under ``prefix/``, in key order."""

    @abc.abstractmethod
    def sweep_scratch(self, grace_seconds: float, now: float | None = None) -> list[str]:
        """Remove this host's temporary files (and, on an object store, unfinished uploads)
        untouched for ``grace_seconds``; return what was removed."""

    @abc.abstractmethod
    def check(self) -> None:
        """Raise StorageUnavailable unless the storage can be used (startup, /healthz)."""

    @abc.abstractmethod
    def describe(self) -> str:
        """Where objects go, for logs (no credentials)."""


def sweep_directory(directory: Path, grace_seconds: float, now: float | None = None) -> list[str]:
    """Remove the files and folders directly under ``directory`` whose newest file is older than
    ``grace_seconds``; return their names."""
    now = time.time() if now is None else now
    removed: list[str] = []
    if not directory.is_dir():
        return removed
    for entry in sorted(directory.iterdir()):
        try:
            newest = max(
                (p.stat().st_mtime for p in entry.rglob("*") if p.is_file()),
                default=entry.stat().st_mtime,
            )
        except FileNotFoundError:
            continue  # removed meanwhile by its owner
        if now - newest <= grace_seconds:
            continue
        if entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
        removed.append(entry.name)
    return removed
