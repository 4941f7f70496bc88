"""Issue 24 §5: a per-tenant quota of sample rows, deletion and retention of sample outputs.

26 × 1 M-row samples wrote 438 MB in 16 s with no bound and nothing was ever removed. Now the
rows of a tenant's queued, running and stored samples are capped (counted under the tenant's row
lock, so a burst cannot pass it), a finished sample can be deleted, and a succeeded sample's
output is deleted ``RHOSYNTH_SAMPLE_RETENTION_DAYS`` after it finished (status ``expired``).
Real HTTP against an API of its own (no worker: samples are drawn in this process).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import update

from app.db.base import utcnow
from app.jobs.sweep import sweep_storage
from app.samples.execution import execute_sample
from app.samples.models import Sample
from app.samples.recovery import expire_samples
from app.storage import open_storage
from tests.conftest import Tenant, make_tenant
from tests.support.api import succeeded_job
from tests.support.stack import SHORT_LEASE, Stack, temporary_stack

QUOTA = 100
BURST = 12


@pytest.fixture(scope="module")
def quota_stack(_services: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with temporary_stack(
        "sample-quota",
        tmp_path_factory.mktemp("sample-quota"),
        tenant_sample_rows_quota=QUOTA,
        tenant_max_live_samples=50,
    ) as stack:
        yield stack


@pytest.fixture
def tenant(quota_stack: Stack) -> Iterator[Tenant]:
    t = make_tenant(quota_stack)
    yield t
    t.close()


@pytest.fixture
def job_id(quota_stack: Stack, tenant: Tenant, people_csv: bytes, people_schema: str) -> str:
    return succeeded_job(quota_stack, tenant, people_csv, people_schema)


def _ask(tenant: Tenant, job_id: str, rows: int) -> httpx.Response:
    return tenant.analyst.post(f"/v1/jobs/{job_id}/samples", json={"rows": rows})


def _drawn(stack: Stack, tenant: Tenant, sample_id: str) -> dict[str, Any]:
    """Answer messages until this sample is drawn (a message draws the fairest queued sample,
    which may be an earlier test's)."""
    for _ in range(100):
        sample: dict[str, Any] = tenant.analyst.get(f"/v1/samples/{sample_id}").json()
        if sample["status"] != "queued":
            break
        assert execute_sample(stack.settings, uuid.UUID(sample_id)) == "succeeded"
    assert sample["status"] == "succeeded", sample
    return sample


def test_the_quota_counts_queued_and_stored_rows_and_deleting_frees_them(
    quota_stack: Stack, tenant: Tenant, job_id: str
) -> None:
    first = _ask(tenant, job_id, 60)
    assert first.status_code == 202, first.text
    over = _ask(tenant, job_id, 41)
    assert over.status_code == 409, over.text
    assert "hold 60 rows (queued, running or stored) and this one asks for 41" in over.text
    assert "the quota is 100 rows" in over.text
    assert _ask(tenant, job_id, 40).status_code == 202  # exactly at the quota
    sample_id = first.json()["id"]
    # A queued sample may still publish: it cannot be deleted.
    queued = tenant.analyst.delete(f"/v1/samples/{sample_id}")
    assert queued.status_code == 409 and "wait until it has finished" in queued.text
    sample = _drawn(quota_stack, tenant, sample_id)  # drawn: now stored, still counted
    assert _ask(tenant, job_id, 1).status_code == 409
    storage = open_storage(quota_stack.settings)
    with quota_stack.session() as session:
        stored = session.get(Sample, uuid.UUID(sample["id"]))
        assert stored is not None and stored.output_key is not None
        key = stored.output_key
    assert storage.exists(key)
    assert tenant.analyst.delete(f"/v1/samples/{sample_id}").status_code == 204
    assert tenant.analyst.delete(f"/v1/samples/{sample_id}").status_code == 204  # idempotent
    assert not storage.exists(key)
    assert tenant.analyst.get(f"/v1/samples/{sample_id}").json()["status"] == "deleted"
    gone = tenant.analyst.get(f"/v1/samples/{sample_id}/output")
    assert gone.status_code == 410 and "the sample was deleted" in gone.text
    assert _ask(tenant, job_id, 60).status_code == 202  # its 60 rows are free again


def test_a_burst_cannot_pass_the_quota(quota_stack: Stack, tenant: Tenant, job_id: str) -> None:
    """12 requests of 30 rows released together by a barrier against a quota of 100: exactly
    three are accepted (the rows are counted under the tenant's row lock)."""
    barrier = threading.Barrier(BURST)
    authorization = tenant.analyst.headers["Authorization"]

    def ask(_: int) -> int:
        with httpx.Client(
            base_url=quota_stack.base_url, headers={"Authorization": authorization}, timeout=60
        ) as client:
            barrier.wait()
            return client.post(f"/v1/jobs/{job_id}/samples", json={"rows": 30}).status_code

    with ThreadPoolExecutor(BURST) as pool:
        codes = list(pool.map(ask, range(BURST)))
    assert codes.count(202) == 3, codes
    assert set(codes) == {202, 409}, codes


def test_a_sample_past_its_retention_expires_and_its_output_is_deleted(
    quota_stack: Stack, tenant: Tenant, job_id: str
) -> None:
    settings = quota_stack.settings
    old, recent = (_ask(tenant, job_id, 50).json()["id"] for _ in range(2))
    for sample_id in (old, recent):
        _drawn(quota_stack, tenant, sample_id)
    retention = timedelta(days=settings.sample_retention_days)
    with quota_stack.session() as session:
        session.execute(
            update(Sample)
            .where(Sample.id == uuid.UUID(old))
            .values(finished_at=utcnow() - retention - timedelta(minutes=1))
        )
        session.commit()
        key = session.get(Sample, uuid.UUID(old)).output_key  # type: ignore[union-attr]
    assert key is not None
    storage = open_storage(settings)
    assert storage.exists(key)
    assert expire_samples(settings) == [uuid.UUID(old)]
    assert not storage.exists(key)
    assert tenant.analyst.get(f"/v1/samples/{old}").json()["status"] == "expired"
    assert tenant.analyst.get(f"/v1/samples/{recent}").json()["status"] == "succeeded"
    gone = tenant.analyst.get(f"/v1/samples/{old}/output")
    assert gone.status_code == 410 and "RHOSYNTH_SAMPLE_RETENTION_DAYS" in gone.text
    assert tenant.analyst.get(f"/v1/samples/{recent}/output").status_code == 200
    assert _ask(tenant, job_id, 50).status_code == 202  # the expired sample's rows are free
    assert expire_samples(settings) == []  # nothing more to expire


def test_the_sweep_removes_what_a_failed_delete_left(
    quota_stack: Stack, tenant: Tenant, job_id: str, tmp_path: Path
) -> None:
    """The output is deleted after the commit, best effort; if that fails the storage sweep
    removes it (deleted and expired samples keep nothing)."""
    settings = quota_stack.settings
    sample_id = _ask(tenant, job_id, 10).json()["id"]
    _drawn(quota_stack, tenant, sample_id)
    with quota_stack.session() as session:
        sample = session.get(Sample, uuid.UUID(sample_id))
        assert sample is not None and sample.output_key is not None
        key = sample.output_key
        sample.status = "deleted"  # as if DELETE committed and its storage delete then failed
        session.commit()
    storage = open_storage(settings)
    assert storage.exists(key)
    sweep_storage(settings, grace_seconds=0)
    assert not storage.exists(key)


@pytest.fixture(scope="module")
def short_limit_stack(_services: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with temporary_stack(
        "sample-time",
        tmp_path_factory.mktemp("sample-time"),
        job_time_limit_seconds=60,
        **SHORT_LEASE,
    ) as stack:
        yield stack


def test_a_sample_whose_drawing_passes_the_time_limit_is_refused(
    short_limit_stack: Stack, people_csv: bytes, people_schema: str
) -> None:
    """A privsyn model re-runs GUM on the rows it draws (its own iterations per row and target):
    with 10,000 iterations and a 60 s limit, a million rows are refused (422, naming the most
    rows that fit) before anything is queued, and that many rows are accepted."""
    stack = short_limit_stack
    tenant = make_tenant(stack)
    try:
        params = {"iterations": 10_000}
        job = succeeded_job(
            stack, tenant, people_csv, people_schema, method="privsyn", rows=20, params=params
        )
        refused = _ask(tenant, job, 1_000_000)
        assert refused.status_code == 422, refused.text
        detail = refused.json()["detail"]
        assert "drawing 1000000 rows from this 'privsyn' model needs at least about" in detail
        assert "more than the time limit per job of 60 s: ask for at most" in detail
        most = int(detail.rsplit("at most ", 1)[1].split()[0])
        assert 0 < most < 1_000_000
        assert _ask(tenant, job, most).status_code == 202
        assert _ask(tenant, job, most + 1).status_code == 422
        listed = tenant.analyst.get(f"/v1/jobs/{job}/samples").json()["items"]
        assert [s["rows"] for s in listed] == [most]
    finally:
        tenant.close()
