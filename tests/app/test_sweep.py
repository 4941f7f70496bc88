"""The storage sweep removes only files that no published state refers to."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

from app.jobs.sweep import sweep_storage
from tests.conftest import Tenant
from tests.support.api import create_dataset, submit
from tests.support.stack import Stack


def _touch(path: Path, age: float = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x")
    then = time.time() - age
    os.utime(path, (then, then))
    return path


def test_sweep(api_stack: Stack, tenant: Tenant, people_csv: bytes, people_schema: str) -> None:
    root = api_stack.settings.resolved_storage_dir
    live = create_dataset(tenant.owner, people_csv, people_schema)
    erased = create_dataset(tenant.owner, people_csv, people_schema)
    queued = submit(tenant.analyst, live["id"]).json()["id"]
    assert tenant.owner.delete(f"/v1/datasets/{erased['id']}").status_code == 200
    live_table = root / "datasets" / live["id"] / "table.arrow"
    stale_tmp = _touch(root / "tmp" / "dead-upload", age=100)
    fresh_tmp = _touch(root / "tmp" / "upload-in-progress")
    leftover = _touch(
        root / "datasets" / erased["id"] / "table.arrow", age=100
    )  # crash after commit
    unknown_output = _touch(root / "outputs" / str(uuid.uuid4()) / "attempt-1.parquet", age=100)
    live_attempt = _touch(root / "outputs" / queued / "attempt-1.parquet", age=100)

    report = sweep_storage(api_stack.settings, grace_seconds=50)
    assert not stale_tmp.exists() and not leftover.exists() and not unknown_output.exists()
    assert fresh_tmp.exists(), "younger than the grace period"
    assert live_table.exists(), "a live dataset's table is never swept"
    assert live_attempt.exists(), "a job that is not finished may still publish it"
    assert len(report.removed) == 3
    fresh_tmp.unlink()


def test_sweep_keeps_only_the_published_attempt_with_its_artefacts(
    api_stack: Stack, tenant: Tenant, people_csv: bytes, people_schema: str
) -> None:
    from sqlalchemy import update

    from app.jobs.models import Job
    from app.samples.models import Sample

    root = api_stack.settings.resolved_storage_dir
    dataset = create_dataset(tenant.owner, people_csv, people_schema)
    job_id = submit(tenant.analyst, dataset["id"]).json()["id"]
    outputs = root / "outputs" / job_id
    with api_stack.session() as session:
        session.execute(
            update(Job)
            .where(Job.id == uuid.UUID(job_id))
            .values(
                status="succeeded",
                attempt=2,
                output_key=f"outputs/{job_id}/attempt-2.parquet",
                artefacts=["record.npz"],
            )
        )
        job = session.get(Job, uuid.UUID(job_id))
        assert job is not None
        failed_sample = Sample(
            tenant_id=job.tenant_id,
            dataset_id=job.dataset_id,
            job_id=job.id,
            rows=5,
            seed=1,
            requested_by=job.submitted_by,
            status="failed",
            attempt=1,
        )
        session.add(failed_sample)
        session.flush()
        sample_id = failed_sample.id
    lost_output = _touch(outputs / "attempt-1.parquet", age=100)
    lost_artefact = _touch(outputs / "attempt-1" / "record.npz", age=100)
    published = _touch(outputs / "attempt-2.parquet", age=100)
    published_artefact = _touch(outputs / "attempt-2" / "record.npz", age=100)
    lost_sample = _touch(root / "samples" / str(sample_id) / "attempt-1.parquet", age=100)

    sweep_storage(api_stack.settings, grace_seconds=50)
    assert published.exists() and published_artefact.exists()
    assert not lost_output.exists() and not lost_artefact.exists()
    assert not lost_sample.exists()


def test_sweep_keeps_a_published_partitioned_output_and_removes_a_crashed_attempts_parts(
    api_stack: Stack, tenant: Tenant, people_csv: bytes, people_schema: str
) -> None:
    """A partitioned output (app/jobs/partitioned_output.py) is published as the manifest inside
    its attempt's folder: the folder is kept; the parts of an attempt that crashed before its
    manifest are removed."""
    from sqlalchemy import update

    from app.jobs.models import Job

    root = api_stack.settings.resolved_storage_dir
    dataset = create_dataset(tenant.owner, people_csv, people_schema)
    job_id = submit(tenant.analyst, dataset["id"]).json()["id"]
    outputs = root / "outputs" / job_id
    with api_stack.session() as session:
        session.execute(
            update(Job)
            .where(Job.id == uuid.UUID(job_id))
            .values(
                status="succeeded",
                attempt=2,
                output_key=f"outputs/{job_id}/attempt-2/parts/manifest.json",
                artefacts=["record.npz"],
            )
        )
    crashed_part = _touch(outputs / "attempt-1" / "parts" / "part-00000.parquet", age=100)
    manifest = _touch(outputs / "attempt-2" / "parts" / "manifest.json", age=100)
    part = _touch(outputs / "attempt-2" / "parts" / "part-00000.parquet", age=100)
    artefact = _touch(outputs / "attempt-2" / "record.npz", age=100)

    sweep_storage(api_stack.settings, grace_seconds=50)
    assert manifest.exists() and part.exists() and artefact.exists()
    assert not crashed_part.exists()
