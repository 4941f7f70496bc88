"""The recovery pass: queued jobs expire (reservation released), lost messages are resent, and a
running job whose worker vanished after a cancel request ends cancelled, still charged."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from sqlalchemy import update

from app.db.base import utcnow
from app.db.session import get_session_factory
from app.jobs import recovery
from app.jobs.execution import claim_and_charge
from app.jobs.models import Job
from app.jobs.recovery import recover_jobs
from tests.conftest import Tenant
from tests.support.api import budget, create_dataset, submit
from tests.support.ledger import assert_reconciled
from tests.support.stack import Stack


def _set(stack: Stack, job_id: str, **values: object) -> None:
    with stack.session() as session:
        session.execute(update(Job).where(Job.id == uuid.UUID(job_id)).values(**values))


def _kinds(tenant: Tenant, dataset_id: str) -> list[str]:
    return [
        e["kind"] for e in tenant.owner.get(f"/v1/datasets/{dataset_id}/ledger").json()["items"]
    ]


def test_queued_job_expires_and_releases(
    api_stack: Stack, tenant: Tenant, people_csv: bytes, people_schema: str
) -> None:
    dataset = create_dataset(tenant.owner, people_csv, people_schema)
    job_id = submit(tenant.analyst, dataset["id"], rho="0.3").json()["id"]
    fresh_id = submit(tenant.analyst, dataset["id"], rho="0.2").json()["id"]
    ttl = api_stack.settings.queued_job_ttl_seconds
    _set(api_stack, job_id, created_at=utcnow() - timedelta(seconds=ttl + 1))
    report = recover_jobs(api_stack.settings)
    assert uuid.UUID(job_id) in report.expired
    assert uuid.UUID(fresh_id) not in report.expired
    job = tenant.analyst.get(f"/v1/jobs/{job_id}").json()
    assert job["status"] == "cancelled"
    assert job["error"] == "the job expired while queued"
    assert tenant.analyst.get(f"/v1/jobs/{fresh_id}").json()["status"] == "queued"
    assert _kinds(tenant, dataset["id"]) == ["grant", "reserve", "reserve", "release"]
    assert budget(tenant.analyst, dataset["id"])["reserved_rho"] == "0.2"
    assert recover_jobs(api_stack.settings).expired == [], "expiry happens once"
    assert_reconciled(api_stack, dataset["id"])


def test_stale_queued_job_is_resent(
    api_stack: Stack, tenant: Tenant, people_csv: bytes, people_schema: str
) -> None:
    dataset = create_dataset(tenant.owner, people_csv, people_schema)
    job_id = submit(tenant.analyst, dataset["id"], rho="0.1").json()["id"]
    assert uuid.UUID(job_id) not in recover_jobs(api_stack.settings).resent
    # Stale, and older than every other test's queued job on this shared stack: a pass resends
    # the 100 stalest (repository.touch_stale_queued), and the API stack has no worker, so other
    # tests' jobs stay queued (with more than 100 of them, a job stale by just one second was
    # not in the first page).
    _set(api_stack, job_id, enqueued_at=utcnow() - timedelta(days=3650))
    assert uuid.UUID(job_id) in recover_jobs(api_stack.settings).resent
    assert uuid.UUID(job_id) not in recover_jobs(api_stack.settings).resent, "stamped when resent"
    assert _kinds(tenant, dataset["id"]) == ["grant", "reserve"]


def test_cancel_requested_then_worker_lost(
    api_stack: Stack, tenant: Tenant, people_csv: bytes, people_schema: str
) -> None:
    dataset = create_dataset(tenant.owner, people_csv, people_schema)
    job_id = submit(tenant.analyst, dataset["id"], rho="0.4").json()["id"]
    factory = get_session_factory(api_stack.settings.sqlalchemy_url)
    assert claim_and_charge(factory, api_stack.settings, uuid.UUID(job_id)) is not None
    assert tenant.analyst.post(f"/v1/jobs/{job_id}/cancel").json()["cancel_requested"] is True
    _set(api_stack, job_id, lease_expires_at=utcnow() - timedelta(seconds=1))
    report = recover_jobs(api_stack.settings)
    assert uuid.UUID(job_id) in report.cancelled
    assert tenant.analyst.get(f"/v1/jobs/{job_id}").json()["status"] == "cancelled"
    assert _kinds(tenant, dataset["id"]) == ["grant", "reserve", "spend"]
    assert claim_and_charge(factory, api_stack.settings, uuid.UUID(job_id)) is None
    assert_reconciled(api_stack, dataset["id"])


def _row(stack: Stack, job_id: str) -> Job:
    with stack.session() as session:
        job = session.get(Job, uuid.UUID(job_id))
        assert job is not None
        session.expunge(job)
        return job


def test_claim_sets_the_attempt_deadline(
    api_stack: Stack, tenant: Tenant, people_csv: bytes, people_schema: str
) -> None:
    dataset = create_dataset(tenant.owner, people_csv, people_schema)
    job_id = submit(tenant.analyst, dataset["id"], rho="0.1").json()["id"]
    factory = get_session_factory(api_stack.settings.sqlalchemy_url)
    before = utcnow()
    claim = claim_and_charge(factory, api_stack.settings, uuid.UUID(job_id))
    assert claim is not None
    limit = timedelta(seconds=api_stack.settings.job_time_limit_seconds)
    deadline = _row(api_stack, job_id).deadline_at
    assert deadline is not None and before + limit <= deadline <= utcnow() + limit
    assert claim.deadline_at == deadline


def test_lost_attempt_past_its_deadline_fails_instead_of_retrying(
    api_stack: Stack, tenant: Tenant, people_csv: bytes, people_schema: str
) -> None:
    """Celery's hard time limit killed the attempt: its lease was renewed until after the
    deadline, then ran out. A retry would be a second noisy run for one charge."""
    dataset = create_dataset(tenant.owner, people_csv, people_schema)
    job_id = submit(tenant.analyst, dataset["id"], rho="0.4").json()["id"]
    factory = get_session_factory(api_stack.settings.sqlalchemy_url)
    assert claim_and_charge(factory, api_stack.settings, uuid.UUID(job_id)) is not None
    now = utcnow()
    _set(
        api_stack,
        job_id,
        deadline_at=now - timedelta(seconds=30),
        lease_expires_at=now - timedelta(seconds=1),
    )
    # A redelivered message must not start a fresh attempt either.
    assert claim_and_charge(factory, api_stack.settings, uuid.UUID(job_id)) is None
    report = recover_jobs(api_stack.settings)
    assert uuid.UUID(job_id) in report.timed_out
    assert uuid.UUID(job_id) not in report.requeued
    seconds = api_stack.settings.job_time_limit_seconds
    job = tenant.analyst.get(f"/v1/jobs/{job_id}").json()
    assert job["status"] == "failed"
    assert job["error"] == f"the job exceeded its time limit of {seconds} s; its budget stays spent"
    assert _row(api_stack, job_id).attempt == 1
    assert claim_and_charge(factory, api_stack.settings, uuid.UUID(job_id)) is None
    assert _kinds(tenant, dataset["id"]) == ["grant", "reserve", "spend"]
    assert_reconciled(api_stack, dataset["id"])


def test_lost_attempt_before_its_deadline_is_retried(
    api_stack: Stack, tenant: Tenant, people_csv: bytes, people_schema: str
) -> None:
    dataset = create_dataset(tenant.owner, people_csv, people_schema)
    job_id = submit(tenant.analyst, dataset["id"], rho="0.2").json()["id"]
    factory = get_session_factory(api_stack.settings.sqlalchemy_url)
    assert claim_and_charge(factory, api_stack.settings, uuid.UUID(job_id)) is not None
    _set(api_stack, job_id, lease_expires_at=utcnow() - timedelta(seconds=1))
    report = recover_jobs(api_stack.settings)
    assert uuid.UUID(job_id) in report.requeued
    claim = claim_and_charge(factory, api_stack.settings, uuid.UUID(job_id))
    assert claim is not None and claim.attempt == 2
    assert _kinds(tenant, dataset["id"]) == ["grant", "reserve", "spend"]


def test_every_expired_lease_is_recovered_however_long_the_backlog(
    api_stack: Stack,
    tenant: Tenant,
    people_csv: bytes,
    people_schema: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Pages of two: five lost jobs (plus whatever other tests left expired in this database)
    # take several pages. One page per pass once left a job behind a backlog indefinitely.
    monkeypatch.setattr(recovery, "_PAGE", 2)
    dataset = create_dataset(tenant.owner, people_csv, people_schema)
    factory = get_session_factory(api_stack.settings.sqlalchemy_url)
    lost = []
    for _ in range(5):
        job_id = submit(tenant.analyst, dataset["id"], rho="0.1").json()["id"]
        assert claim_and_charge(factory, api_stack.settings, uuid.UUID(job_id)) is not None
        _set(api_stack, job_id, lease_expires_at=utcnow() - timedelta(seconds=1))
        lost.append(uuid.UUID(job_id))
    report = recover_jobs(api_stack.settings)
    assert set(lost) <= set(report.requeued)
    assert len(report.requeued) == len(set(report.requeued)), "each job is recovered once"
    for job_id in lost:
        assert tenant.analyst.get(f"/v1/jobs/{job_id}").json()["status"] == "queued"
