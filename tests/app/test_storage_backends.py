"""Both storage backends (a local directory, and an S3 bucket on moto's real S3-protocol server)
keep the same contract: streamed round trips, prefix erasure, listings, missing keys."""

from __future__ import annotations

import hashlib
import os
import time
import tracemalloc
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.storage import LocalStorage, ObjectMissing, Storage, StorageUnavailable
from app.storage import s3 as s3_module
from app.storage.s3 import S3Location, S3Options, S3Storage
from tests.conftest import Tenant
from tests.support.s3 import REGION, S3Server
from tests.support.stack import Stack

MIB = 1024 * 1024
# Small parts so that a test object spans several: S3's smallest part is 5 MiB.
PART = 5 * MIB


def s3_backend(server: S3Server, scratch: Path, **options: int) -> S3Storage:
    return S3Storage(
        S3Location(server.bucket, f"unit-{uuid.uuid4().hex[:8]}"),
        scratch,
        S3Options(
            endpoint_url=server.endpoint,
            region=REGION,
            addressing_style="path",
            **{
                "multipart_threshold": PART,
                "multipart_chunksize": PART,
                "max_concurrency": 2,
                **options,
            },
        ),
    )


@pytest.fixture(params=["local", "s3"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Storage]:
    if request.param == "local":
        yield LocalStorage(tmp_path / "root")
    else:
        yield s3_backend(request.getfixturevalue("s3_server"), tmp_path / "scratch")


def _write_random(path: Path, size: int) -> str:
    digest = hashlib.sha256()
    with open(path, "wb") as handle:
        for _ in range(size // MIB):
            block = os.urandom(MIB)
            digest.update(block)
            handle.write(block)
    return digest.hexdigest()


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(MIB):
            digest.update(block)
    return digest.hexdigest()


def _put(storage: Storage, key: str, data: bytes) -> None:
    temp = storage.temp_path(".bin")
    temp.write_bytes(data)
    try:
        storage.put_file(temp, key)
    finally:
        temp.unlink(missing_ok=True)


def test_streamed_round_trip_never_holds_the_object(storage: Storage) -> None:
    """A 24 MiB object (several parts) goes up and comes back through bounded buffers: the
    Python heap of this process never grows by more than a third of it (moto keeps the object
    in its own process)."""
    size = 24 * MIB
    source = storage.temp_path(".bin")
    expected = _write_random(source, size)
    key = "datasets/round-trip/table.parquet"
    bound = size // 3

    tracemalloc.start()
    try:
        storage.put_file(source, key)
        _, upload_peak = tracemalloc.get_traced_memory()

        tracemalloc.reset_peak()
        digest = hashlib.sha256()
        chunks = 0
        for block in storage.iter_bytes(key, chunk=256 * 1024):
            assert 0 < len(block) <= 256 * 1024
            digest.update(block)
            chunks += 1
        _, stream_peak = tracemalloc.get_traced_memory()

        tracemalloc.reset_peak()
        with storage.local_copy(key) as copy:
            assert _sha256_file(copy) == expected
        _, copy_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    source.unlink(missing_ok=True)

    assert digest.hexdigest() == expected
    assert chunks >= size // (256 * 1024)
    assert storage.size(key) == size
    assert storage.exists(key)
    for label, peak in (("upload", upload_peak), ("stream", stream_peak), ("copy", copy_peak)):
        assert peak < bound, f"{label} held {peak / MIB:.1f} MiB of a {size / MIB:.0f} MiB object"
    if isinstance(storage, S3Storage):
        assert not copy.exists(), "the downloaded copy is removed after the block"
        assert list(storage.scratch.iterdir()) == []


def test_delete_tree_erases_the_prefix_and_nothing_beside_it(storage: Storage) -> None:
    keys = [
        "outputs/j/attempt-1.parquet",
        "outputs/j/attempt-1/record.npz",
        "outputs/j/attempt-1/report.json",
        "outputs/j/attempt-10/record.npz",
        "outputs/j/attempt-2.parquet",
    ]
    for index, key in enumerate(keys):
        _put(storage, key, f"object {index}".encode())
    before = time.time()

    listed = list(storage.list_objects("outputs/j"))
    assert [item.key for item in listed] == sorted(keys)
    assert [item.size for item in listed] == [len(f"object {keys.index(o.key)}") for o in listed]
    assert all(abs(item.modified - before) < 60 for item in listed)
    assert [item.key for item in storage.list_objects("outputs/j/attempt-1")] == [
        "outputs/j/attempt-1/record.npz",
        "outputs/j/attempt-1/report.json",
    ]

    storage.delete_tree("outputs/j/attempt-1")  # the artefacts: not the output, not attempt-10
    assert [item.key for item in storage.list_objects("outputs/j")] == [
        "outputs/j/attempt-1.parquet",
        "outputs/j/attempt-10/record.npz",
        "outputs/j/attempt-2.parquet",
    ]
    storage.delete_tree("outputs/j/attempt-2.parquet")  # a single object
    storage.delete("outputs/j/attempt-1.parquet")
    assert [item.key for item in storage.list_objects("outputs/j")] == [
        "outputs/j/attempt-10/record.npz"
    ]
    storage.delete_tree("outputs/j")
    assert list(storage.list_objects("outputs")) == []


def test_delete_tree_in_batches(
    s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More objects than one DeleteObjects request takes (1000; 3 here) are all erased."""
    monkeypatch.setattr(s3_module, "DELETE_BATCH", 3)
    storage = s3_backend(s3_server, tmp_path)
    for index in range(8):
        _put(storage, f"samples/s/attempt-{index}.parquet", b"x")
    _put(storage, "samples/t/attempt-1.parquet", b"kept")
    storage.delete_tree("samples/s")
    assert [item.key for item in storage.list_objects("samples")] == ["samples/t/attempt-1.parquet"]


def test_missing_keys(storage: Storage) -> None:
    key = "datasets/none/table.parquet"
    assert not storage.exists(key)
    with pytest.raises(ObjectMissing):
        storage.size(key)
    with pytest.raises(ObjectMissing):
        storage.iter_bytes(key)
    with pytest.raises(ObjectMissing), storage.local_copy(key):
        pass
    assert isinstance(ObjectMissing(key), FileNotFoundError)
    storage.delete(key)  # nothing to delete is not an error
    storage.delete_tree("datasets/none")
    assert list(storage.list_objects("datasets")) == []
    for bad in ("../escape", "/absolute", "a/../../b", "a//b", ""):
        with pytest.raises(ValueError, match="storage key"):
            storage.exists(bad)


def test_sweep_scratch(storage: Storage) -> None:
    stale = storage.temp_path(".upload")
    stale.write_bytes(b"left by a process that died")
    then = time.time() - 100
    os.utime(stale, (then, then))
    fresh = storage.temp_path(".upload")
    fresh.write_bytes(b"being written")
    removed = storage.sweep_scratch(50)
    assert not stale.exists() and fresh.exists()
    assert [name.split("/")[-1] for name in removed] == [stale.name]


def test_unfinished_multipart_uploads_are_aborted(s3_server: S3Server, tmp_path: Path) -> None:
    storage = s3_backend(s3_server, tmp_path)
    client = s3_server.client()
    full = storage.location.full("outputs/j/attempt-1.parquet")
    upload = client.create_multipart_upload(Bucket=s3_server.bucket, Key=full)
    client.upload_part(
        Bucket=s3_server.bucket, Key=full, UploadId=upload["UploadId"], PartNumber=1, Body=b"x"
    )

    def pending() -> list[Any]:
        listed = client.list_multipart_uploads(Bucket=s3_server.bucket, Prefix=full)
        return list(listed.get("Uploads", []))

    # Ages count from the server's Initiated time (moto reports a fixed one).
    initiated = pending()[0]["Initiated"].timestamp()
    assert storage.sweep_scratch(50, now=initiated + 10) == []  # a live upload
    assert [u["UploadId"] for u in pending()] == [upload["UploadId"]]
    assert storage.sweep_scratch(50, now=initiated + 100) == ["upload:outputs/j/attempt-1.parquet"]
    assert pending() == []


def test_unreachable_store_is_storage_unavailable(s3_server: S3Server, tmp_path: Path) -> None:
    """A bucket that does not exist, and a server that does not answer, both raise
    StorageUnavailable (an OSError, answered 503 by the API), not ObjectMissing. (A HEAD of a
    key in a missing bucket is a bare 404, which reads as a missing key: /healthz and the
    startup check are what name a missing bucket.)"""
    missing_bucket = S3Storage(
        S3Location(f"absent-{uuid.uuid4().hex[:8]}", ""),
        tmp_path,
        S3Options(endpoint_url=s3_server.endpoint, region=REGION, addressing_style="path"),
    )
    with pytest.raises(StorageUnavailable):
        missing_bucket.check()
    with pytest.raises(StorageUnavailable):  # a GET names the bucket as what is missing
        missing_bucket.iter_bytes("datasets/x/table.parquet")
    from tests.support.stack import free_port

    nobody = S3Storage(
        S3Location("bucket", ""),
        tmp_path,
        S3Options(endpoint_url=f"http://127.0.0.1:{free_port()}", region=REGION),
    )
    with pytest.raises(StorageUnavailable) as raised:
        nobody.check()
    assert isinstance(raised.value, OSError)


def test_api_answers_503_while_the_object_store_is_unreachable(
    api_stack: Stack, tenant: Tenant, people_csv: bytes, people_schema: str
) -> None:
    """Uploads, downloads and /healthz when no S3 server answers: a retryable 503, as for a
    full disk, and /healthz names storage as the part that is down."""
    from fastapi.testclient import TestClient
    from sqlalchemy import update

    from app.jobs.models import Job
    from app.main import create_app
    from tests.support.api import create_dataset, submit, upload
    from tests.support.stack import free_port

    dataset = create_dataset(tenant.owner, people_csv, people_schema)
    job_id = submit(tenant.analyst, dataset["id"]).json()["id"]
    with api_stack.session() as session:
        session.execute(
            update(Job)
            .where(Job.id == uuid.UUID(job_id))
            .values(status="succeeded", output_key=f"outputs/{job_id}/attempt-1.parquet")
        )
    settings = api_stack.settings.model_copy(
        update={
            "storage_url": "s3://nowhere/rhosynth",
            "s3_endpoint_url": f"http://127.0.0.1:{free_port()}",
            "s3_region": REGION,
        }
    )
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        health = client.get("/healthz")
        assert health.status_code == 503
        assert health.json() == {
            "status": "unavailable",
            "database": "ok",
            "storage": "unavailable",
            "pool": "ok",
        }

        client.headers["Authorization"] = tenant.owner.headers["Authorization"]
        stored = upload(client, people_csv, people_schema)  # type: ignore[arg-type]
        assert stored.status_code == 503 and stored.headers["Retry-After"] == "60", stored.text

        download = client.get(f"/v1/jobs/{job_id}/output", params={"format": "parquet"})
        assert download.status_code == 503 and download.headers["Retry-After"] == "60"
        assert download.json() == {
            "detail": "the service cannot reach its storage right now; retry later"
        }
    assert len(tenant.owner.get("/v1/datasets").json()["items"]) == 1  # the first one only


def test_serve_refuses_to_start_without_its_bucket(s3_server: S3Server, tmp_path: Path) -> None:
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("RHOSYNTH_")}
    env.update(
        RHOSYNTH_DATABASE_URL="postgresql://nobody@127.0.0.1:1/none",
        RHOSYNTH_BROKER_URL="redis://127.0.0.1:1/0",
        RHOSYNTH_SECRET_KEY="k" * 40,
        RHOSYNTH_HOME=str(tmp_path),
        RHOSYNTH_STORAGE_URL="s3://absent-bucket/rhosynth",
        RHOSYNTH_S3_ENDPOINT_URL=s3_server.endpoint,
        RHOSYNTH_S3_ADDRESSING_STYLE="path",
    )
    started = subprocess.run(
        [sys.executable, "-m", "app.cli", "serve", "--port", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert started.returncode == 1, started.stderr
    assert "storage unusable (object store s3://absent-bucket/rhosynth at" in started.stderr
    assert "bucket 'absent-bucket' does not exist" in started.stderr


def test_erasure_that_fails_after_the_commit_is_finished_by_the_sweep(
    api_stack: Stack,
    tenant: Tenant,
    tmp_path: Path,
    people_csv: bytes,
    people_schema: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The deletion is committed, so DELETE answers 200 even when the store refuses to erase;
    the sweep removes the deleted dataset's table on its next pass, whatever its age."""
    import logging

    from fastapi.testclient import TestClient

    from app.jobs.sweep import sweep_storage
    from app.main import create_app
    from tests.support.api import create_dataset

    settings = api_stack.settings.model_copy(update={"storage_dir": tmp_path / "storage"})
    table = tmp_path / "storage" / "datasets"
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        client.headers["Authorization"] = tenant.owner.headers["Authorization"]
        dataset = create_dataset(client, people_csv, people_schema)  # type: ignore[arg-type]
        assert (table / dataset["id"] / "table.arrow").is_file()

        def refuse(self: LocalStorage, prefix: str) -> None:
            raise StorageUnavailable("the store is down")

        monkeypatch.setattr(LocalStorage, "delete_tree", refuse)
        with caplog.at_level(logging.ERROR, logger="app.datasets.service"):
            deleted = client.delete(f"/v1/datasets/{dataset['id']}")
        assert deleted.status_code == 200 and deleted.json()["deleted_at"]
        assert f"dataset {dataset['id']}: erasing its stored files failed" in caplog.text
        assert (table / dataset["id"] / "table.arrow").is_file()

    monkeypatch.undo()
    report = sweep_storage(settings, grace_seconds=3600)
    assert report.removed == [f"datasets/{dataset['id']}"]
    assert not (table / dataset["id"]).exists()


def test_a_published_object_missing_while_its_dataset_lives_is_a_storage_fault(
    api_stack: Stack,
    tenant: Tenant,
    tmp_path: Path,
    people_csv: bytes,
    people_schema: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A missing object (a lost bucket, a lifecycle rule) must not be reported as the dataset's
    erasure (410): it is a retryable 503 and an error in the log, until the dataset really is
    deleted."""
    import logging

    from fastapi.testclient import TestClient
    from sqlalchemy import update

    from app.jobs.models import Job
    from app.main import create_app
    from tests.support.api import create_dataset, submit

    settings = api_stack.settings.model_copy(update={"storage_dir": tmp_path / "storage"})
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        client.headers["Authorization"] = tenant.owner.headers["Authorization"]
        dataset = create_dataset(client, people_csv, people_schema)  # type: ignore[arg-type]
        job_id = submit(client, dataset["id"]).json()["id"]  # type: ignore[arg-type]
        with api_stack.session() as session:
            session.execute(
                update(Job)
                .where(Job.id == uuid.UUID(job_id))
                .values(status="succeeded", output_key=f"outputs/{job_id}/attempt-1.parquet")
            )
        with caplog.at_level(logging.ERROR, logger="app.jobs.service"):
            missing = client.get(f"/v1/jobs/{job_id}/output", params={"format": "parquet"})
        assert missing.status_code == 503 and missing.headers["Retry-After"] == "60"
        assert f"published object outputs/{job_id}/attempt-1.parquet" in caplog.text
        assert client.delete(f"/v1/datasets/{dataset['id']}").status_code == 200
        gone = client.get(f"/v1/jobs/{job_id}/output", params={"format": "parquet"})
        assert gone.status_code == 410
