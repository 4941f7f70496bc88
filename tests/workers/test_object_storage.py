"""Two hosts sharing only PostgreSQL, Redis and an S3 bucket (issue 15 §1).

The API and the worker are separate processes with separate local storage roots (their own
``RHOSYNTH_STORAGE_DIR``, used only as scratch space): everything one hands the other goes
through the object store, here moto's real S3-protocol server started by the test setup.
"""

from __future__ import annotations

import csv
import io
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from sqlalchemy import update

from app.jobs.models import Job
from app.jobs.sweep import sweep_storage
from tests.conftest import Tenant, make_tenant
from tests.support.api import create_dataset, submit, wait_for, wait_for_sample
from tests.support.s3 import S3Server
from tests.support.stack import Stack

PREFIX = "deployment"


@pytest.fixture(scope="module")
def two_hosts(
    _services: None, s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """The API "host" (storage root api-host/) and one worker "host" (worker-host/)."""
    workdir = tmp_path_factory.mktemp("two-hosts")
    prefix = f"{PREFIX}-{uuid.uuid4().hex[:8]}"
    stack = Stack.create(
        "s3",
        workdir,
        workers=0,
        storage_dir=str(workdir / "api-host" / "storage"),
        home=str(workdir / "api-host" / "home"),
        **s3_server.settings(prefix),
    )
    try:
        stack.worker_values.update(
            storage_dir=str(workdir / "worker-host" / "storage"),
            home=str(workdir / "worker-host" / "home"),
        )
        stack.start_worker()
        stack.start_reports_worker()
        yield stack
    finally:
        stack.destroy()


def _prefix(stack: Stack) -> str:
    return str(stack.values["storage_url"]).removeprefix("s3://").partition("/")[2]


def _stored_files(root: Path) -> list[str]:
    """Files under a host's local storage root (scratch included)."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_release_flow_through_the_object_store(
    two_hosts: Stack, s3_server: S3Server, people_csv: bytes, people_schema: str
) -> None:
    stack = two_hosts
    tenant: Tenant = make_tenant(stack)
    prefix = _prefix(stack)
    api_root = Path(stack.values["storage_dir"])
    worker_root = Path(stack.worker_values["storage_dir"])
    assert api_root != worker_root
    try:
        dataset = create_dataset(tenant.owner, people_csv, people_schema, budget_rho="2")
        dataset_id = dataset["id"]
        # The codes, and the raw numeric values kept beside them for the owner's report.
        assert s3_server.keys(f"{prefix}/datasets/{dataset_id}/") == [
            f"{prefix}/datasets/{dataset_id}/table.arrow",
            f"{prefix}/datasets/{dataset_id}/values.arrow",
        ]

        response = submit(tenant.analyst, dataset_id, rho="1", method="mst", seed=5)
        assert response.status_code == 202, response.text
        job = wait_for(tenant.analyst, response.json()["id"])
        assert job["status"] == "succeeded", (job, stack.logs())
        job_id = job["id"]
        deadline = time.monotonic() + 60
        while "report-owner.json" not in tenant.owner.get(f"/v1/jobs/{job_id}").json()["artefacts"]:
            assert time.monotonic() < deadline, stack.logs()
            time.sleep(0.1)

        # The output: Parquet byte for byte as stored, CSV with every row.
        with stack.session() as session:
            published = session.get(Job, uuid.UUID(job_id))
            assert published is not None and published.output_key is not None
            output_key = f"{prefix}/{published.output_key}"
        attempt_prefix = output_key.removesuffix(".parquet") + "/"
        stored = s3_server.client().get_object(Bucket=s3_server.bucket, Key=output_key)
        parquet = tenant.analyst.get(f"/v1/jobs/{job_id}/output", params={"format": "parquet"})
        assert parquet.status_code == 200
        assert parquet.content == stored["Body"].read()
        table = pq.read_table(io.BytesIO(parquet.content))
        assert table.num_rows == job["output_rows"] > 0
        listed = tenant.analyst.get(f"/v1/jobs/{job_id}/output", params={"format": "csv"})
        assert listed.status_code == 200
        rows = list(csv.reader(io.StringIO(listed.text)))
        assert rows[0] == table.column_names and len(rows) == table.num_rows + 1

        # The report and the measurements, both tiers; the model.
        report = tenant.analyst.get(f"/v1/jobs/{job_id}/report")
        assert report.status_code == 200 and report.json()
        html = tenant.analyst.get(f"/v1/jobs/{job_id}/report", params={"format": "html"})
        assert html.status_code == 200 and "<html" in html.text.lower()
        owner_report = tenant.owner.get(f"/v1/jobs/{job_id}/report", params={"tier": "owner"})
        assert owner_report.status_code == 200 and owner_report.json()
        # Compared on values: the worker read the raw values and the output from the bucket.
        assert owner_report.json()["values"]["available"] is True
        for fmt in ("json", "parquet", "npz"):
            measured = tenant.analyst.get(f"/v1/jobs/{job_id}/measurements", params={"format": fmt})
            assert measured.status_code == 200 and measured.content, fmt
        assert json.loads(tenant.analyst.get(f"/v1/jobs/{job_id}/measurements").content), (
            "the JSON measurements"
        )
        model = tenant.analyst.get(f"/v1/jobs/{job_id}/model")
        assert model.status_code == 200 and len(model.content) > 0

        # A derived sample: the worker reads the model from the bucket and stores the rows.
        drawn = tenant.analyst.post(f"/v1/jobs/{job_id}/samples", json={"rows": 120, "seed": 7})
        assert drawn.status_code == 202, drawn.text
        sample = wait_for_sample(tenant.analyst, drawn.json()["id"])
        assert sample["status"] == "succeeded", (sample, stack.logs())
        sample_out = tenant.analyst.get(
            f"/v1/samples/{sample['id']}/output", params={"format": "parquet"}
        )
        assert sample_out.status_code == 200
        assert pq.read_table(io.BytesIO(sample_out.content)).num_rows == 120
        sample_csv = tenant.analyst.get(f"/v1/samples/{sample['id']}/output")
        assert sample_csv.status_code == 200 and len(sample_csv.text.splitlines()) == 121

        prefixes = [
            f"{prefix}/datasets/{dataset_id}/",
            f"{prefix}/outputs/{job_id}/",
            f"{prefix}/samples/{sample['id']}/",
        ]
        assert all(s3_server.keys(p) for p in prefixes)
        artefacts = s3_server.keys(attempt_prefix)
        assert len(artefacts) == len(tenant.owner.get(f"/v1/jobs/{job_id}").json()["artefacts"])

        # Nothing of it was ever a file on either host: all went through the bucket, and
        # scratch copies were removed.
        assert _stored_files(api_root) == []
        assert _stored_files(worker_root) == []

        # Erase on delete: no object is left under the dataset's prefixes.
        assert tenant.owner.delete(f"/v1/datasets/{dataset_id}").status_code == 200
        assert [key for p in prefixes for key in s3_server.keys(p)] == []
        gone = tenant.analyst.get(f"/v1/jobs/{job_id}/output", params={"format": "parquet"})
        assert gone.status_code == 410
        assert tenant.analyst.get(f"/v1/samples/{sample['id']}/output").status_code == 410
    finally:
        tenant.close()


def test_sweep_on_the_object_store(
    two_hosts: Stack, s3_server: S3Server, people_csv: bytes, people_schema: str
) -> None:
    """Old unpublished attempts and an erased dataset's leftovers are removed from the bucket,
    by their LastModified; the published attempt, a live dataset and fresh objects are kept."""
    stack = two_hosts
    tenant = make_tenant(stack)
    prefix = _prefix(stack)
    client = s3_server.client()

    def put(key: str) -> str:
        client.put_object(Bucket=s3_server.bucket, Key=f"{prefix}/{key}", Body=b"x")
        return f"{prefix}/{key}"

    try:
        dataset = create_dataset(tenant.owner, people_csv, people_schema)
        erased = create_dataset(tenant.owner, people_csv, people_schema)
        assert tenant.owner.delete(f"/v1/datasets/{erased['id']}").status_code == 200
        # A job that ran (attempt 1, with its owner tier), then recorded as if a second
        # attempt had published: attempt 1's objects are now unpublished leftovers.
        job_id = submit(tenant.analyst, dataset["id"], rho="0.1").json()["id"]
        assert wait_for(tenant.analyst, job_id)["status"] == "succeeded", stack.logs()
        deadline = time.monotonic() + 60
        while "report-owner.json" not in tenant.owner.get(f"/v1/jobs/{job_id}").json()["artefacts"]:
            assert time.monotonic() < deadline, stack.logs()
            time.sleep(0.1)
        with stack.session() as session:
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
        live_table = f"{prefix}/datasets/{dataset['id']}/table.arrow"
        lost = [
            put(f"outputs/{job_id}/attempt-1.parquet"),
            put(f"outputs/{job_id}/attempt-1/record.npz"),
            put(f"outputs/{uuid.uuid4()}/attempt-1.parquet"),  # no such job
            put(f"datasets/{uuid.uuid4()}/table.arrow"),  # an upload whose row never came
            put(f"datasets/{erased['id']}/table.arrow"),  # erasure interrupted
        ]
        published = [
            put(f"outputs/{job_id}/attempt-2.parquet"),
            put(f"outputs/{job_id}/attempt-2/record.npz"),
        ]

        # Everything is younger than the grace period: only the erased dataset's table goes
        # (its deletion committed, so nothing writes there again).
        report = sweep_storage(stack.settings, grace_seconds=600)
        assert report.removed == [f"datasets/{erased['id']}"]
        assert s3_server.keys(lost[3]) == [lost[3]]

        # An hour later: every unpublished entry is older than the grace period.
        report = sweep_storage(stack.settings, grace_seconds=600, now=time.time() + 3600)
        for key in lost:
            assert s3_server.keys(key) == [], key
        for key in [*published, live_table]:
            assert s3_server.keys(key) == [key], key
        assert f"outputs/{job_id}/attempt-1" in report.removed
        assert f"outputs/{job_id}/attempt-1.parquet" in report.removed
        assert f"outputs/{job_id}/attempt-2" not in report.removed
    finally:
        tenant.close()
