"""Storage in one local directory (the default, and the embedded mode's).

Objects are files under the root at their key (``datasets/<id>/table.parquet``), so the root can
move. Files are written to ``tmp/`` under the root (the same filesystem) and renamed into place
after an fsync, so a reader never sees a partial file.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from app.storage.base import (
    DEFAULT_CHUNK_BYTES,
    ObjectMissing,
    Storage,
    StoredObject,
    check_key,
    sweep_directory,
)


class LocalStorage(Storage):
    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, key: str) -> Path:
        """The file of ``key`` (this backend only: callers go through the Storage methods)."""
        path = (self.root / check_key(key)).resolve()
        if self.root.resolve() not in path.parents:
            raise ValueError("storage key escapes the storage root")
        return path

    def temp_path(self, suffix: str = "") -> Path:
        """A fresh path under ``tmp/``, on the same filesystem as the final location."""
        directory = self.root / "tmp"
        directory.mkdir(parents=True, exist_ok=True)
        return directory / f"{uuid.uuid4().hex}{suffix}"

    def put_file(self, local: Path, key: str) -> None:
        """Atomically move the finished file to ``key`` (fsync, then rename)."""
        target = self.path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(local, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(local, target)

    @contextlib.contextmanager
    def local_copy(self, key: str) -> Iterator[Path]:
        path = self.path(key)
        if not path.is_file():
            raise ObjectMissing(key)
        yield path

    def iter_bytes(self, key: str, chunk: int = DEFAULT_CHUNK_BYTES) -> Iterator[bytes]:
        path = self.path(key)
        try:
            handle = open(path, "rb")  # noqa: SIM115 - closed by the generator below
        except FileNotFoundError:
            raise ObjectMissing(key) from None
        return _read_blocks(handle, chunk)

    def size(self, key: str) -> int:
        path = self.path(key)
        if not path.is_file():
            raise ObjectMissing(key)
        return path.stat().st_size

    def delete(self, key: str) -> None:
        self.path(key).unlink(missing_ok=True)

    def delete_tree(self, prefix: str) -> None:
        path = self.path(prefix)
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)

    def list_objects(self, prefix: str) -> Iterator[StoredObject]:
        base = self.path(prefix)
        if not base.is_dir():
            return
        root = self.root.resolve()
        found: list[StoredObject] = []
        for file in base.rglob("*"):
            try:
                stat = file.stat()
            except FileNotFoundError:
                continue  # removed while listing
            if file.is_file():
                found.append(
                    StoredObject(file.relative_to(root).as_posix(), stat.st_size, stat.st_mtime)
                )
        # Key order, as an object store lists them (not path order: "a.parquet" < "a/b").
        yield from sorted(found, key=lambda stored: stored.key)

    def sweep_scratch(self, grace_seconds: float, now: float | None = None) -> list[str]:
        return [f"tmp/{name}" for name in sweep_directory(self.root / "tmp", grace_seconds, now)]

    def check(self) -> None:
        """The root exists (or can be made) and is writable."""
        self.root.mkdir(parents=True, exist_ok=True)
        if not os.access(self.root, os.W_OK | os.X_OK):
            raise PermissionError(f"storage directory {self.root} is not writable")

    def describe(self) -> str:
        return f"local directory {self.root}"


def _read_blocks(handle: BinaryIO, chunk: int) -> Iterator[bytes]:
    with handle:
        while block := handle.read(chunk):
            yield block
