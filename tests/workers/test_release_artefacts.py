"""A release explains itself: the two-tier report, the noisy measurements and free re-sampling,
end to end with a real worker process and real HTTP (issue 13)."""

from __future__ import annotations

import io
import json
import threading
import uuid
from fractions import Fraction
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from app.datasets.ingest import read_encoded_table
from app.jobs.models import Job
from app.reports import names
from app.storage import dataset_table_key
from engine.release.model_file import read_model_file
from engine.release.record import ReleaseRecord
from engine.reports.owner import build_owner_report
from engine.reports.release import build_release_report
from engine.tables.encoding import TableSchema
from engine.tables.local import load_table
from tests.conftest import Tenant
from tests.support.api import wait_for_sample
from tests.support.ledger import assert_reconciled
from tests.support.stack import Stack

ANALYST_ARTEFACTS = {
    names.RECORD,
    names.MODEL,
    names.MEASUREMENTS_JSON,
    names.MEASUREMENTS_PARQUET,
    names.RELEASE_JSON,
    names.RELEASE_HTML,
}


def _ledger(tenant: Tenant, dataset_id: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = tenant.owner.get(f"/v1/datasets/{dataset_id}/ledger").json()[
        "items"
    ]
    return items


def _artefact(stack: Stack, job_id: str, name: str) -> Path:
    with stack.session() as session:
        job = session.get(Job, uuid.UUID(job_id))
        assert job is not None
        key = names.artefact_key(job.id, job.attempt, name)
    return stack.settings.resolved_storage_dir / key


def test_artefacts_are_listed_by_tier(worker_tenant: Tenant, released: dict[str, Any]) -> None:
    job_id = released["job"]["id"]
    assert set(released["job"]["artefacts"]) == ANALYST_ARTEFACTS
    owner_view = worker_tenant.owner.get(f"/v1/jobs/{job_id}").json()
    assert set(owner_view["artefacts"]) == ANALYST_ARTEFACTS | names.OWNER_ONLY


def test_release_tier_is_built_from_published_artefacts_only_whatever_the_table(
    worker_stack: Stack, worker_tenant: Tenant, released: dict[str, Any], people_schema: str
) -> None:
    job_id = released["job"]["id"]
    response = worker_tenant.analyst.get(f"/v1/jobs/{job_id}/report")
    assert response.status_code == 200, response.text
    stored = response.json()
    assert stored["tier"] == "release"

    # Rebuild it from what was published (the record, the model and the synthetic rows) with no
    # access to the real table: the same report. If the worker had used the real table for the
    # release tier, this would differ.
    schema = TableSchema.from_json(json.loads(people_schema))
    record = ReleaseRecord.from_bytes(_artefact(worker_stack, job_id, names.RECORD).read_bytes())
    model, _ = read_model_file(_artefact(worker_stack, job_id, names.MODEL).read_bytes())
    output = worker_tenant.analyst.get(f"/v1/jobs/{job_id}/output", params={"format": "parquet"})
    path = worker_stack.workdir / f"{job_id}.parquet"
    path.write_bytes(output.content)
    synthetic = load_table(path, schema)

    # Swap the real table for another one of the same schema: the release tier rebuilt from the
    # published artefacts is unchanged, while the owner tier, which reads the table, changes.
    table = worker_stack.settings.resolved_storage_dir / dataset_table_key(
        uuid.UUID(released["dataset"]["id"])
    )
    real = read_encoded_table(table, schema)
    swapped = np.zeros_like(real)
    pq.write_table(pa.table({n: swapped[:, j] for j, n in enumerate(schema.names)}), table)
    rebuilt = build_release_report(schema, record, synthetic, model_marginal=model.marginal)
    assert json.loads(json.dumps(rebuilt)) == stored
    stored_owner = worker_tenant.owner.get(
        f"/v1/jobs/{job_id}/report", params={"tier": "owner"}
    ).json()
    swapped_owner = build_owner_report(
        schema, read_encoded_table(table, schema), synthetic, rng=np.random.default_rng(0)
    )
    assert swapped_owner["marginals"]["mean_tvd"] != stored_owner["marginals"]["mean_tvd"]

    html = worker_tenant.analyst.get(f"/v1/jobs/{job_id}/report", params={"format": "html"})
    assert html.status_code == 200
    assert html.headers["content-type"].startswith("text/html")
    assert "default-src 'none'" in html.headers["content-security-policy"]
    assert "<html" in html.text.lower()


def test_owner_tier_is_for_owners_only(worker_tenant: Tenant, released: dict[str, Any]) -> None:
    job_id = released["job"]["id"]
    for fmt in ("json", "html"):
        refused = worker_tenant.analyst.get(
            f"/v1/jobs/{job_id}/report", params={"tier": "owner", "format": fmt}
        )
        assert refused.status_code == 403
        assert "owner" in refused.json()["detail"]
    owner = worker_tenant.owner.get(f"/v1/jobs/{job_id}/report", params={"tier": "owner"})
    assert owner.status_code == 200
    report = owner.json()
    assert report["tier"] == "owner"
    # The worker compared values: the raw values kept at upload against the published rows.
    assert report["values"]["available"] is True
    assert {c["column"] for c in report["values"]["columns"]} == {"age", "income"}
    assert report["verdict"]["status"] in ("values_off", "values_close")
    page = worker_tenant.owner.get(
        f"/v1/jobs/{job_id}/report", params={"tier": "owner", "format": "html"}
    )
    assert page.status_code == 200
    assert "<svg" in page.text or "data:image/png" in page.text


def test_measurements_are_the_noisy_marginals_and_add_up_to_the_charge(
    worker_tenant: Tenant, released: dict[str, Any], people_schema: str
) -> None:
    job_id = released["job"]["id"]
    body = worker_tenant.analyst.get(f"/v1/jobs/{job_id}/measurements").json()
    measured = [Fraction(m["rho"]) for m in body["measurements"]]
    others = [Fraction(c["rho"]) for c in body["other_releases"]]
    assert sum(measured) + sum(others) == Fraction(released["job"]["rho"])
    schema = TableSchema.from_json(json.loads(people_schema))
    one_ways = [m for m in body["measurements"] if len(m["attributes"]) == 1]
    assert {m["attributes"][0] for m in one_ways} == set(schema.names)
    city = next(m for m in one_ways if m["attributes"] == ["city"])
    declared = json.loads(people_schema)["columns"][0]["categories"]
    assert city["labels"] == [declared]
    assert len(city["noisy_counts"]) == len(declared) and city["sigma"] > 0

    table = pq.read_table(
        io.BytesIO(
            worker_tenant.analyst.get(
                f"/v1/jobs/{job_id}/measurements", params={"format": "parquet"}
            ).content
        )
    )
    assert table.column_names == ["measurement", "attributes", "cell", "noisy_count", "sigma"]
    assert table.num_rows == sum(int(np.prod(m["shape"])) for m in body["measurements"])
    flat = [c for m in body["measurements"] for c in m["noisy_counts"]]
    assert table.column("noisy_count").to_pylist() == flat


def test_samples_are_free_reproducible_and_typed(
    worker_stack: Stack, worker_tenant: Tenant, released: dict[str, Any], people_schema: str
) -> None:
    dataset_id = released["dataset"]["id"]
    job_id = released["job"]["id"]
    ledger_before = _ledger(worker_tenant, dataset_id)

    def draw(seed: int, rows: int = 700) -> bytes:
        response = worker_tenant.analyst.post(
            f"/v1/jobs/{job_id}/samples", json={"rows": rows, "seed": seed}
        )
        assert response.status_code == 202, response.text
        assert response.json()["rho"] == "0"
        sample = wait_for_sample(worker_tenant.analyst, response.json()["id"])
        assert sample["status"] == "succeeded", (sample, worker_stack.logs())
        assert sample["output_rows"] == rows
        out = worker_tenant.analyst.get(
            f"/v1/samples/{sample['id']}/output", params={"format": "parquet"}
        )
        assert out.status_code == 200
        return out.content

    first, again, other = draw(11), draw(11), draw(12)
    assert pq.read_table(io.BytesIO(first)).equals(pq.read_table(io.BytesIO(again)))
    assert not pq.read_table(io.BytesIO(first)).equals(pq.read_table(io.BytesIO(other)))
    table = pq.read_table(io.BytesIO(first))
    original = pq.read_table(
        io.BytesIO(
            worker_tenant.analyst.get(
                f"/v1/jobs/{job_id}/output", params={"format": "parquet"}
            ).content
        )
    )
    assert table.schema == original.schema  # typed like the job's output
    declared = set(json.loads(people_schema)["columns"][0]["categories"])
    assert set(table.column("city").to_pylist()) <= declared

    assert _ledger(worker_tenant, dataset_id) == ledger_before  # no entry for samples
    assert_reconciled(worker_stack, dataset_id)
    listed = worker_tenant.analyst.get(f"/v1/jobs/{job_id}/samples").json()["items"]
    assert len(listed) == 3


def test_simultaneous_samples_never_touch_the_ledger(
    worker_stack: Stack, worker_tenant: Tenant, released: dict[str, Any]
) -> None:
    dataset_id = released["dataset"]["id"]
    job_id = released["job"]["id"]
    ledger_before = _ledger(worker_tenant, dataset_id)
    budget_before = worker_tenant.analyst.get(f"/v1/datasets/{dataset_id}/budget").json()
    count = 12
    barrier = threading.Barrier(count)
    statuses: list[int] = []
    ids: list[str] = []
    lock = threading.Lock()

    def request(seed: int) -> None:
        with httpx.Client(
            base_url=str(worker_tenant.analyst.base_url),
            headers=dict(worker_tenant.analyst.headers),
            timeout=30,
        ) as client:
            barrier.wait()
            response = client.post(f"/v1/jobs/{job_id}/samples", json={"rows": 50, "seed": seed})
        with lock:
            statuses.append(response.status_code)
            if response.status_code == 202:
                ids.append(response.json()["id"])

    threads = [threading.Thread(target=request, args=(seed,)) for seed in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert statuses == [202] * count
    for sample_id in ids:
        assert wait_for_sample(worker_tenant.analyst, sample_id)["status"] == "succeeded"
    assert _ledger(worker_tenant, dataset_id) == ledger_before
    assert worker_tenant.analyst.get(f"/v1/datasets/{dataset_id}/budget").json() == budget_before


def test_samples_refused_for_unfinished_jobs_and_models_that_do_not_exist(
    worker_tenant: Tenant, released: dict[str, Any]
) -> None:
    job_id = released["job"]["id"]
    too_many = worker_tenant.analyst.post(
        f"/v1/jobs/{job_id}/samples", json={"rows": 10**12, "seed": 1}
    )
    assert too_many.status_code == 422 and "limit" in too_many.json()["detail"]
    unknown = worker_tenant.analyst.post(f"/v1/jobs/{uuid.uuid4()}/samples", json={"rows": 5})
    assert unknown.status_code == 404
    methods = worker_tenant.analyst.get("/v1/methods").json()["items"]
    assert {m["name"]: m["resamplable"] for m in methods}["mst"] is True


def test_erasing_the_dataset_erases_reports_and_samples(
    worker_tenant: Tenant, released: dict[str, Any]
) -> None:
    job_id = released["job"]["id"]
    sample = worker_tenant.analyst.post(f"/v1/jobs/{job_id}/samples", json={"rows": 20})
    sample_id = sample.json()["id"]
    assert wait_for_sample(worker_tenant.analyst, sample_id)["status"] == "succeeded"
    deleted = worker_tenant.owner.delete(f"/v1/datasets/{released['dataset']['id']}")
    assert deleted.status_code in (200, 204), deleted.text
    assert worker_tenant.analyst.get(f"/v1/jobs/{job_id}/report").status_code == 410
    assert worker_tenant.analyst.get(f"/v1/jobs/{job_id}/measurements").status_code == 410
    assert worker_tenant.analyst.get(f"/v1/samples/{sample_id}/output").status_code == 410
    again = worker_tenant.analyst.post(f"/v1/jobs/{job_id}/samples", json={"rows": 20})
    assert again.status_code == 410


def test_a_lost_sample_attempt_is_retried_and_publishes_once(
    worker_stack: Stack, worker_tenant: Tenant, released: dict[str, Any]
) -> None:
    """A worker that claimed a sample and died: the recovery loop puts it back in the queue and
    the real worker draws it (the same rows as any attempt would: same seed)."""
    from datetime import timedelta

    from sqlalchemy import update

    from app.db.base import utcnow
    from app.samples import repository as sample_repository
    from app.samples.models import Sample
    from app.samples.recovery import recover_samples

    job_id = released["job"]["id"]
    settings = worker_stack.settings
    # Claim it first, as a worker that then dies would: the real worker's message finds it
    # running and skips it.
    with worker_stack.session() as session:
        job = session.get(Job, uuid.UUID(job_id))
        assert job is not None
        sample = Sample(
            tenant_id=job.tenant_id,
            dataset_id=job.dataset_id,
            job_id=job.id,
            rows=40,
            seed=5,
            requested_by=job.submitted_by,
            status="queued",
            attempt=0,
        )
        session.add(sample)
        session.flush()
        sample_id = sample.id
        now = utcnow()
        assert sample_repository.claim(session, sample_id, now=now, lease_until=now) is not None
        session.execute(
            update(Sample)
            .where(Sample.id == sample_id)
            .values(lease_expires_at=now - timedelta(seconds=1))
        )
    assert sample_id in recover_samples(settings)
    done = wait_for_sample(worker_tenant.analyst, str(sample_id))
    assert done["status"] == "succeeded" and done["output_rows"] == 40
    with worker_stack.session() as session:
        stored = session.get(Sample, sample_id)
        assert stored is not None and stored.attempt == 2
        assert stored.output_key is not None and stored.output_key.endswith("attempt-2.parquet")


def test_the_model_and_record_download_feed_the_local_commands(
    worker_stack: Stack, worker_tenant: Tenant, released: dict[str, Any]
) -> None:
    """GET …/model is the CLI's model file: `rhosynth sample` draws from it locally; GET
    …/measurements?format=npz is the release record `rhosynth report --record` reads."""
    from click.testing import CliRunner

    from app.cli import main

    job_id = released["job"]["id"]
    folder = worker_stack.workdir / f"local-{job_id}"
    folder.mkdir()
    model = worker_tenant.analyst.get(f"/v1/jobs/{job_id}/model")
    assert model.status_code == 200
    (folder / "model.npz").write_bytes(model.content)
    record = worker_tenant.analyst.get(f"/v1/jobs/{job_id}/measurements", params={"format": "npz"})
    assert record.status_code == 200
    loaded = ReleaseRecord.from_bytes(record.content)
    assert loaded.rho == Fraction(released["job"]["rho"])
    out = folder / "more.parquet"
    result = CliRunner().invoke(
        main,
        ["sample", str(folder / "model.npz"), "--rows", "300", "--seed", "4", "--out", str(out)],
    )
    assert result.exit_code == 0, result.output
    assert pq.read_table(out).num_rows == 300
