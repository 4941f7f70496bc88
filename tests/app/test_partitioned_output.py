"""A release above the row threshold is stored as Parquet parts and downloads as parts or one
CSV (issue 29 §2; app/jobs/partitioned_output.py). Jobs run in this process with a small
threshold (700-row chunks), against an API-only stack."""

from __future__ import annotations

import csv
import io
import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from app.jobs import execution
from app.jobs.owner_tier import build_owner_tier
from tests.conftest import Tenant, make_tenant
from tests.support.api import create_dataset, submit
from tests.support.stack import Stack


@pytest.fixture(scope="module")
def parts_stack(_services: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """API only, used by this module alone: the one queued job is the one a run claims."""
    stack = Stack.create("parts", Path(tmp_path_factory.mktemp("parts-stack")))
    try:
        yield stack
    finally:
        stack.destroy()


@pytest.fixture
def parts_tenant(parts_stack: Stack) -> Iterator[Tenant]:
    tenant = make_tenant(parts_stack)
    yield tenant
    tenant.close()


def _run(stack: Stack, job_id: str) -> None:
    settings = stack.settings.model_copy(
        update={
            "partitioned_output_rows": 1000,
            "output_chunk_rows": 700,
            "output_workers": 2,
            "report_sample_rows": 500,
        }
    )
    outcome = execution.execute_job(settings, uuid.UUID(job_id))
    assert outcome.status == "succeeded", stack.logs()


def _parquet(content: bytes) -> pa.Table:
    return pq.read_table(io.BytesIO(content))


def test_a_large_release_is_stored_and_downloaded_as_parts(
    parts_stack: Stack, parts_tenant: Tenant, people_csv: bytes, people_schema: str
) -> None:
    analyst = parts_tenant.analyst
    dataset = create_dataset(parts_tenant.owner, people_csv, people_schema, budget_rho="4")

    # Below the threshold: one file, as before; it has no parts.
    small = submit(analyst, dataset["id"], rho="0.5", method="mst", rows=600, seed=3).json()
    _run(parts_stack, small["id"])
    single = analyst.get(f"/v1/jobs/{small['id']}/output", params={"format": "parquet"})
    assert single.status_code == 200
    assert _parquet(single.content).num_rows == 600
    refused = analyst.get(f"/v1/jobs/{small['id']}/output/parts")
    assert refused.status_code == 409

    big = submit(analyst, dataset["id"], rho="0.5", method="mst", rows=2500, seed=3).json()
    _run(parts_stack, big["id"])
    job = analyst.get(f"/v1/jobs/{big['id']}").json()
    assert job["status"] == "succeeded" and job["output_rows"] == 2500

    listing = analyst.get(f"/v1/jobs/{big['id']}/output/parts")
    assert listing.status_code == 200, listing.text
    body = listing.json()
    assert body["format"] == "parquet" and body["rows"] == 2500
    assert [p["name"] for p in body["parts"]] == [f"part-{i:05d}.parquet" for i in range(4)]
    assert [p["rows"] for p in body["parts"]] == [700, 700, 700, 400]

    tables = []
    for part in body["parts"]:
        response = analyst.get(part["url"])
        assert response.status_code == 200
        assert len(response.content) == part["bytes"]
        table = _parquet(response.content)
        assert table.num_rows == part["rows"]
        # The service's output format: the same columns and types as the single-file output.
        assert table.schema.equals(_parquet(single.content).schema)
        tables.append(table)
    whole = pa.concat_tables(tables)

    # One CSV for the whole release: the header once, then the parts' rows in order.
    as_csv = analyst.get(f"/v1/jobs/{big['id']}/output", params={"format": "csv"})
    assert as_csv.status_code == 200
    rows = list(csv.reader(io.StringIO(as_csv.text)))
    assert rows[0] == whole.column_names and len(rows) == 2501
    first_part_csv = analyst.get(body["parts"][0]["url"], params={"format": "csv"}).text
    assert as_csv.text.startswith(first_part_csv)

    # Parquet as one file is refused with where to look instead; unknown parts are not found.
    whole_parquet = analyst.get(f"/v1/jobs/{big['id']}/output", params={"format": "parquet"})
    assert whole_parquet.status_code == 409
    assert "/output/parts" in whole_parquet.json()["detail"]
    for name in ("part-00009.parquet", "manifest.json", "..%2Fattempt-1.parquet"):
        assert analyst.get(f"/v1/jobs/{big['id']}/output/parts/{name}").status_code == 404

    # The release report states the release's rows and the subsample its shares come from.
    report = analyst.get(f"/v1/jobs/{big['id']}/report", params={"format": "json"}).json()
    assert report["synthetic_rows"] == 2500 and report["report_sample_rows"] == 500

    # The owner tier reads the published values from the parts.
    assert build_owner_tier(parts_stack.settings, uuid.UUID(big["id"])) == "built"
