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
from app.storage.local import LocalStorage
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

    # The owner tier compares the published values of the reports' subsample (read from the
    # parts) with the real ones: the values line up with the subsample's codes.
    assert build_owner_tier(parts_stack.settings, uuid.UUID(big["id"])) == "built"
    owner = parts_tenant.owner.get(f"/v1/jobs/{big['id']}/report", params={"tier": "owner"})
    values = owner.json()["values"]
    assert values["available"] is True, values
    assert {c["column"] for c in values["columns"]} == {"age", "income"}


def test_parts_are_kept_from_other_tenants_failed_attempts_and_erased_datasets(
    parts_stack: Stack,
    parts_tenant: Tenant,
    people_csv: bytes,
    people_schema: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    analyst = parts_tenant.analyst
    dataset = create_dataset(parts_tenant.owner, people_csv, people_schema, budget_rho="4")
    outputs = Path(parts_stack.settings.storage_dir) / "outputs"

    # An attempt that fails after its first part is uploaded publishes no manifest and leaves
    # no part behind (its attempt folder is discarded).
    real_put = LocalStorage.put_file
    put: list[str] = []

    def failing_put(self: LocalStorage, local: Path, key: str) -> None:
        if key.endswith("part-00001.parquet"):
            raise OSError("the store is full")
        real_put(self, local, key)
        put.append(key)

    monkeypatch.setattr(LocalStorage, "put_file", failing_put)
    failed = submit(analyst, dataset["id"], rho="0.5", method="mst", rows=2500, seed=5).json()
    settings = parts_stack.settings.model_copy(
        update={"partitioned_output_rows": 1000, "output_chunk_rows": 700, "job_max_attempts": 1}
    )
    assert execution.execute_job(settings, uuid.UUID(failed["id"])).status == "failed"
    first = f"outputs/{failed['id']}/attempt-1/parts/part-00000.parquet"
    assert first in put and not (outputs.parent / first).exists()
    assert not list((outputs / failed["id"]).rglob("*.parquet"))
    assert not list((outputs / failed["id"]).rglob("manifest.json"))
    monkeypatch.setattr(LocalStorage, "put_file", real_put)

    big = submit(analyst, dataset["id"], rho="0.5", method="mst", rows=2500, seed=3).json()
    _run(parts_stack, big["id"])
    listing = f"/v1/jobs/{big['id']}/output/parts"
    part = f"{listing}/part-00000.parquet"
    assert analyst.get(listing).status_code == 200
    assert analyst.get(part).status_code == 200

    # Another tenant's keys see no such job.
    other = make_tenant(parts_stack)
    try:
        assert other.analyst.get(listing).status_code == 404
        assert other.analyst.get(part).status_code == 404
        assert other.owner.get(f"/v1/jobs/{big['id']}/output").status_code == 404
    finally:
        other.close()

    # Deleting the dataset erases every part: the routes answer 410, the files are gone.
    assert list((outputs / big["id"]).rglob("part-*.parquet"))
    assert parts_tenant.owner.delete(f"/v1/datasets/{dataset['id']}").status_code == 200
    assert analyst.get(listing).status_code == 410
    assert analyst.get(part).status_code == 410
    assert not list((outputs / big["id"]).rglob("*"))


def test_part_keys_name_only_parts_of_the_manifests_folder() -> None:
    """The route's name check (app/jobs/partitioned_output.part_key): only part-NNNNN.parquet,
    so no request names the manifest, the subsample's positions or another object."""
    from app.jobs.partitioned_output import SAMPLE_POSITIONS, part_key

    key = "outputs/j/attempt-2/parts/manifest.json"
    assert part_key(key, "part-00003.parquet") == "outputs/j/attempt-2/parts/part-00003.parquet"
    for name in (
        "manifest.json",
        SAMPLE_POSITIONS,
        "../attempt-1.parquet",
        "part-00003.parquet/../../x",
        "part-3.parquet",
        "part-00003.parquet\n",
    ):
        with pytest.raises(KeyError):
            part_key(key, name)


def test_the_client_lists_and_downloads_the_parts(
    parts_stack: Stack,
    parts_tenant: Tenant,
    people_csv: bytes,
    people_schema: str,
    tmp_path: Path,
) -> None:
    """``Client.output_parts`` and ``download_parts``: the parts land as a Parquet dataset that
    pandas reads whole; a one-file release is a Conflict."""
    import pandas as pd

    from rhosynth.client import Client
    from rhosynth.errors import Conflict

    dataset = create_dataset(parts_tenant.owner, people_csv, people_schema, budget_rho="2")
    big = submit(
        parts_tenant.analyst, dataset["id"], rho="0.5", method="mst", rows=1500, seed=4
    ).json()
    _run(parts_stack, big["id"])
    small = submit(
        parts_tenant.analyst, dataset["id"], rho="0.5", method="mst", rows=50, seed=4
    ).json()
    _run(parts_stack, small["id"])
    key = parts_tenant.analyst.headers["Authorization"].removeprefix("Bearer ")
    with Client(parts_stack.base_url, key) as client:
        parts = client.output_parts(big["id"])
        assert [p["rows"] for p in parts] == [700, 700, 100]
        files = client.download_parts(big["id"], tmp_path / "release")
        assert [f.name for f in files] == [p["name"] for p in parts]
        frame = pd.read_parquet(tmp_path / "release")
        assert len(frame) == 1500
        with pytest.raises(Conflict):
            client.output_parts(small["id"])
