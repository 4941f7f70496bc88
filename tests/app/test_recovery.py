"""The recovery pass: queued jobs expire (reservation released), lost messages are resent, and a
running job whose worker vanished after a cancel request ends cancelled, still charged."""

from __future__ import annotations

import uuid
from datetime import timedelta

from sqlalchemy import update

from app.db.base import utcnow
from app.db.session import get_session_factory
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
    _set(
        api_stack,
        job_id,
        enqueued_at=utcnow() - timedelta(seconds=api_stack.settings.requeue_after_seconds + 1),
    )
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
