"""Storage in an S3-compatible object store (AWS S3, MinIO, Ceph RGW, Cloudflare R2), via boto3.

Object ``<key>`` lives at ``s3://<bucket>/<prefix>/<key>``. Nothing is held whole in memory:
uploads and downloads go through boto3's managed transfers (s3transfer), which read a file from
disk part by part (multipart above ``multipart_threshold``) and write a download to disk in small
blocks; HTTP downloads stream the GET body in blocks. Files being written and downloaded copies
live in a local scratch directory (``RHOSYNTH_SCRATCH_DIR``), never shared between hosts.

Publish-once: each attempt writes its own keys (``outputs/<job>/attempt-<n>.parquet``), and the
database's guarded UPDATE decides which attempt is published, exactly as with local files. S3
PUTs are atomic (a reader sees the whole object or none; a multipart upload appears only when it
completes), which is all the rename gave on a local disk.

Credentials come from boto3's standard chain (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY /
AWS_SESSION_TOKEN, AWS_PROFILE and the shared files, web identity, container and instance roles).
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Literal

import boto3
import boto3.exceptions
import botocore.exceptions
from boto3.s3.transfer import TransferConfig
from botocore.config import Config

from app.storage.base import (
    DEFAULT_CHUNK_BYTES,
    ObjectMissing,
    Storage,
    StorageUnavailable,
    StoredObject,
    check_key,
    sweep_directory,
)

if TYPE_CHECKING:
    from mypy_boto3_s3.client import S3Client

logger = logging.getLogger(__name__)

# S3 deletes at most 1000 keys per request.
DELETE_BATCH = 1000
_MISSING_CODES = frozenset({"404", "NoSuchKey", "NotFound"})


@dataclass(frozen=True)
class S3Location:
    """``s3://bucket/prefix`` taken apart."""

    bucket: str
    prefix: str  # "" or a relative path without a trailing slash

    @classmethod
    def parse(cls, url: str) -> S3Location:
        if not url.startswith("s3://"):
            raise ValueError(
                "RHOSYNTH_STORAGE_URL must look like s3://bucket or s3://bucket/prefix"
            )
        bucket, _, prefix = url.removeprefix("s3://").partition("/")
        prefix = prefix.strip("/")
        if not bucket:
            raise ValueError("RHOSYNTH_STORAGE_URL names no bucket")
        if prefix:
            check_key(prefix)
        return cls(bucket, prefix)

    def full(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def relative(self, full: str) -> str:
        return full[len(self.prefix) + 1 :] if self.prefix else full


@dataclass(frozen=True)
class S3Options:
    endpoint_url: str | None = None
    region: str | None = None
    addressing_style: Literal["auto", "path", "virtual"] = "auto"
    # Managed transfers: parts of this size, this many at once (memory ~ chunk × concurrency at
    # most, for downloads' write queue; uploads read each part from the file as it is sent).
    multipart_threshold: int = 64 * 1024 * 1024
    multipart_chunksize: int = 16 * 1024 * 1024
    max_concurrency: int = 4


class S3Storage(Storage):
    def __init__(self, location: S3Location, scratch: Path, options: S3Options) -> None:
        self.location = location
        self.scratch = scratch
        self.options = options
        config = Config(
            region_name=options.region,
            s3={"addressing_style": options.addressing_style},
            retries={"mode": "standard", "max_attempts": 5},
            connect_timeout=5,
            read_timeout=60,
            # The API serves many requests from its thread pool at once.
            max_pool_connections=50,
            # Checksums only where S3 requires them: the defaults of botocore ≥ 1.36 break
            # uploads to several S3-compatible stores (older Ceph RGW, R2, some MinIO).
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        )
        session = boto3.session.Session()
        self._client: S3Client = session.client(
            "s3", endpoint_url=options.endpoint_url, config=config
        )
        # /healthz and the startup check: one try with short timeouts, so that a store that
        # does not answer is reported within the health deadline instead of being retried.
        self._probe: S3Client = session.client(
            "s3",
            endpoint_url=options.endpoint_url,
            config=config.merge(
                Config(
                    retries={"mode": "standard", "max_attempts": 1},
                    connect_timeout=1,
                    read_timeout=1,
                )
            ),
        )
        self._transfer = TransferConfig(
            multipart_threshold=options.multipart_threshold,
            multipart_chunksize=options.multipart_chunksize,
            max_concurrency=options.max_concurrency,
            max_io_queue=16,
            use_threads=options.max_concurrency > 1,
            preferred_transfer_client="classic",
        )

    @property
    def bucket(self) -> str:
        return self.location.bucket

    def _full(self, key: str) -> str:
        return self.location.full(check_key(key))

    @contextlib.contextmanager
    def _errors(self, what: str, key: str) -> Iterator[None]:
        """Boto's errors as ObjectMissing or StorageUnavailable (both OSErrors)."""
        try:
            yield
        except botocore.exceptions.ClientError as error:
            code = str(error.response.get("Error", {}).get("Code", ""))
            if code in _MISSING_CODES:
                raise ObjectMissing(key) from None
            raise StorageUnavailable(
                f"object store refused {what} of {key!r} in bucket {self.bucket!r}: {code}"
            ) from error
        except (botocore.exceptions.BotoCoreError, boto3.exceptions.Boto3Error) as error:
            raise StorageUnavailable(
                f"object store unavailable for {what} of {key!r} in bucket {self.bucket!r}: "
                f"{type(error).__name__}"
            ) from error

    def temp_path(self, suffix: str = "") -> Path:
        self.scratch.mkdir(parents=True, exist_ok=True)
        return self.scratch / f"{uuid.uuid4().hex}{suffix}"

    def put_file(self, local: Path, key: str) -> None:
        full = self._full(key)
        with self._errors("upload", key):
            self._client.upload_file(str(local), self.bucket, full, Config=self._transfer)

    @contextlib.contextmanager
    def local_copy(self, key: str) -> Iterator[Path]:
        full = self._full(key)
        temp = self.temp_path(PurePosixPath(key).suffix)
        try:
            with self._errors("download", key):
                self._client.download_file(self.bucket, full, str(temp), Config=self._transfer)
            yield temp
        finally:
            temp.unlink(missing_ok=True)

    def iter_bytes(self, key: str, chunk: int = DEFAULT_CHUNK_BYTES) -> Iterator[bytes]:
        full = self._full(key)
        with self._errors("download", key):
            response = self._client.get_object(Bucket=self.bucket, Key=full)
        return self._stream(response["Body"], chunk, key)

    def _stream(self, body: Any, chunk: int, key: str) -> Iterator[bytes]:
        try:
            with self._errors("download", key):
                yield from body.iter_chunks(chunk)
        finally:
            body.close()

    def size(self, key: str) -> int:
        full = self._full(key)
        with self._errors("size", key):
            return int(self._client.head_object(Bucket=self.bucket, Key=full)["ContentLength"])

    def delete(self, key: str) -> None:
        full = self._full(key)
        with self._errors("delete", key):
            self._client.delete_object(Bucket=self.bucket, Key=full)

    def delete_tree(self, prefix: str) -> None:
        """Batch-delete every key under ``prefix/`` (1000 per request), then ``prefix``."""
        batch: list[str] = []
        for stored in self.list_objects(prefix):
            batch.append(self.location.full(stored.key))
            if len(batch) == DELETE_BATCH:
                self._delete_batch(batch, prefix)
                batch = []
        if batch:
            self._delete_batch(batch, prefix)
        self.delete(prefix)

    def _delete_batch(self, keys: list[str], prefix: str) -> None:
        with self._errors("delete", prefix):
            response = self._client.delete_objects(
                Bucket=self.bucket,
                Delete={"Objects": [{"Key": key} for key in keys], "Quiet": True},
            )
        errors = response.get("Errors", [])
        if errors:
            first = errors[0]
            raise StorageUnavailable(
                f"object store refused to delete {len(errors)} objects under {prefix!r} in "
                f"bucket {self.bucket!r}: {first.get('Code', '')} {first.get('Key', '')}"
            )

    def list_objects(self, prefix: str) -> Iterator[StoredObject]:
        full = self._full(prefix) + "/"
        paginator = self._client.get_paginator("list_objects_v2")
        with self._errors("list", prefix):
            for page in paginator.paginate(Bucket=self.bucket, Prefix=full):
                for item in page.get("Contents", []):
                    yield StoredObject(
                        self.location.relative(item["Key"]),
                        int(item["Size"]),
                        item["LastModified"].timestamp(),
                    )

    def sweep_scratch(self, grace_seconds: float, now: float | None = None) -> list[str]:
        """This host's stale scratch files, then multipart uploads under the prefix that were
        started more than ``grace_seconds`` ago and never completed (a process died mid-upload;
        their parts are invisible to listings but are stored and billed)."""
        now = time.time() if now is None else now
        removed = [f"scratch/{name}" for name in sweep_directory(self.scratch, grace_seconds, now)]
        base = self.location.full("") if self.location.prefix else ""
        paginator = self._client.get_paginator("list_multipart_uploads")
        with self._errors("list uploads", base or "/"):
            for page in paginator.paginate(Bucket=self.bucket, Prefix=base):
                for upload in page.get("Uploads", []):
                    if now - upload["Initiated"].timestamp() <= grace_seconds:
                        continue
                    self._client.abort_multipart_upload(
                        Bucket=self.bucket, Key=upload["Key"], UploadId=upload["UploadId"]
                    )
                    removed.append(f"upload:{self.location.relative(upload['Key'])}")
        return removed

    def check(self) -> None:
        try:
            with self._errors("access", "/"):
                self._probe.head_bucket(Bucket=self.bucket)
        except ObjectMissing:
            raise StorageUnavailable(f"bucket {self.bucket!r} does not exist") from None

    def describe(self) -> str:
        where = f"s3://{self.bucket}/{self.location.prefix}".rstrip("/")
        endpoint = self.options.endpoint_url or "AWS"
        return f"object store {where} at {endpoint}"
