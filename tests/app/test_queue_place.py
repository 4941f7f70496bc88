"""Issue 26 §3: a queued job says where it stands: its position in its tenant's queue and the
jobs of every tenant that the workers' fair order starts before it. The estimate is checked
against what the production claim path (``claim_next_and_charge``) then does, one claim at a
time with each job finished at once, on PostgreSQL and on SQLite: it must be exact there."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest

from app.auth.service import Principal, authenticate, create_key
from app.cli import run_migrations
from app.config import Settings
from app.db.base import utcnow
from app.db.session import get_session_factory, transaction
from app.jobs import repository as job_repository
from app.jobs import service as job_service
from app.jobs.execution import claim_next_and_charge
from app.jobs.models import Job
from app.jobs.schemas import JobRequest
from tests.support import services
from tests.support.ledger import add_tableless_dataset

pytestmark = pytest.mark.usefixtures("_services")


@pytest.fixture(params=["postgresql", "sqlite"])
def settings(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Settings]:
    tag = uuid.uuid4().hex[:8]
    values: dict[str, object] = {
        "home": tmp_path,
        "queue": f"rhosynth-test-queue-{tag}",
        "broker_url": services.REDIS_URL,
    }
    database = f"rhosynth_test_queue_{tag}"
    if request.param == "postgresql":
        values["database_url"] = services.create_database(database)
        values["secret_key"] = secrets.token_urlsafe(48)
        values["storage_dir"] = str(tmp_path / "storage")
    settings = Settings(**values)  # type: ignore[arg-type]
    run_migrations(settings)
    yield settings
    if request.param == "postgresql":
        services.drop_database(database)


def test_a_queued_jobs_place_is_the_order_the_workers_start_it_in(settings: Settings) -> None:
    factory = get_session_factory(settings.sqlalchemy_url)
    tenants: list[tuple[Principal, uuid.UUID]] = []
    for t in range(3):
        with transaction(factory) as session:
            key = create_key(session, settings.secret_key_bytes(), f"queue-{t}", "owner", "k")
        with transaction(factory) as session:
            principal = authenticate(session, settings.secret_key_bytes(), key.key)
            assert principal is not None
            tenants.append((principal, add_tableless_dataset(session, principal, Decimal(1))))
    # Uneven queues, submitted interleaved: tenant 0 five jobs, tenant 1 two, tenant 2 three.
    order = [1, 0, 0, 2, 0, 1, 2, 0, 2, 0]
    jobs: list[uuid.UUID] = []
    for t in order:
        principal, dataset_id = tenants[t]
        with transaction(factory) as session:
            request = JobRequest(method="independent", budget={"rho": Decimal("0.125")})
            job, _ = job_service.submit_job(session, settings, principal, dataset_id, request, None)
            jobs.append(job.id)
    with transaction(factory) as session:
        places = {}
        for job_id in jobs:
            job = session.get(Job, job_id)
            assert job is not None
            places[job_id] = job_service.queue_out(session, job)
    assert all(place is not None for place in places.values())
    started: list[uuid.UUID] = []
    while len(started) < len(jobs):
        claim = claim_next_and_charge(factory, settings, jobs[0])
        assert claim is not None
        started.append(claim.job_id)
        with transaction(factory) as session:
            assert job_repository.complete(
                session, claim.job_id, 1, output_key="x", output_rows=1, now=utcnow()
            )
    tenant_of = {job_id: order[i] for i, job_id in enumerate(jobs)}
    for index, job_id in enumerate(started):
        place = places[job_id]
        assert place is not None
        assert place.jobs_ahead == index, (index, place)
        same_tenant_before = sum(tenant_of[j] == tenant_of[job_id] for j in started[:index])
        assert place.position == same_tenant_before + 1
    # One job per tenant in turn while all three have some (the first six starts).
    first = [tenant_of[j] for j in started[:6]]
    assert set(first[:3]) == set(first[3:6]) == {0, 1, 2}
    with transaction(factory) as session:
        job = session.get(Job, jobs[0])
        assert job is not None and job_service.queue_out(session, job) is None  # not queued
