"""Issue 26 §3: a queued job says where it stands: its position in its tenant's queue and the
jobs of every tenant that the workers' fair order starts before it, counted on the queue as it
stood at the last whole UTC minute T, so that nothing finer than the minute shows.

On PostgreSQL and on SQLite: the counts are checked against what the production claim path
(``claim_next_and_charge``) then does, one claim at a time with each job finished at once, where
they must be exact; and, with the clocks set by the test, starts, a cancel, a requeue and a
submission after T change no answer until T + 60 s, and then do."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from app.auth.service import Principal, authenticate, create_key
from app.config import Settings
from app.db.base import utcnow
from app.db.session import get_session_factory, transaction
from app.jobs import execution
from app.jobs import repository as job_repository
from app.jobs import service as job_service
from app.jobs.execution import claim_next_and_charge
from app.jobs.models import Job
from app.jobs.schemas import JobRequest, QueueOut
from tests.support import services
from tests.support.ledger import add_tableless_dataset

pytestmark = pytest.mark.usefixtures("_services")


@pytest.fixture(params=["postgresql", "sqlite"])
def settings(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Settings]:
    with services.migrated_settings(request.param, tmp_path, "queue") as settings:
        yield settings


@pytest.fixture(autouse=True)
def _fresh_place_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test its own cache of places (the tests set clocks minutes apart)."""
    monkeypatch.setattr(job_service, "_places", job_service._PlaceCache())


def _tenants(settings: Settings, count: int) -> list[tuple[Principal, uuid.UUID]]:
    factory = get_session_factory(settings.sqlalchemy_url)
    tenants: list[tuple[Principal, uuid.UUID]] = []
    for t in range(count):
        with transaction(factory) as session:
            key = create_key(session, settings.secret_key_bytes(), f"queue-{t}", "owner", "k")
        with transaction(factory) as session:
            principal = authenticate(session, settings.secret_key_bytes(), key.key)
            assert principal is not None
            tenants.append((principal, add_tableless_dataset(session, principal, Decimal(1))))
    return tenants


def _submit(settings: Settings, tenant: tuple[Principal, uuid.UUID]) -> uuid.UUID:
    principal, dataset_id = tenant
    with transaction(get_session_factory(settings.sqlalchemy_url)) as session:
        request = JobRequest(method="independent", budget={"rho": Decimal("0.125")})
        job, _ = job_service.submit_job(session, settings, principal, dataset_id, request, None)
        return job.id


def _place(settings: Settings, job_id: uuid.UUID, now: datetime | None = None) -> QueueOut | None:
    with transaction(get_session_factory(settings.sqlalchemy_url)) as session:
        job = session.get(Job, job_id)
        assert job is not None
        return job_service.queue_out(session, job, now)


def _next_minute() -> datetime:
    """A whole minute after every job the test has submitted so far."""
    return utcnow().replace(second=0, microsecond=0) + timedelta(minutes=2)


def test_a_queued_jobs_place_is_the_order_the_workers_start_it_in(settings: Settings) -> None:
    factory = get_session_factory(settings.sqlalchemy_url)
    tenants = _tenants(settings, 3)
    # Uneven queues, submitted interleaved: tenant 0 five jobs, tenant 1 two, tenant 2 three.
    order = [1, 0, 0, 2, 0, 1, 2, 0, 2, 0]
    jobs = [_submit(settings, tenants[t]) for t in order]
    # Counted on the queue of a minute after every submission (nothing changed since).
    now = _next_minute() + timedelta(seconds=7)
    places = {job_id: _place(settings, job_id, now) for job_id in jobs}
    # Counted a minute behind the last whole minute (QUEUE_SNAPSHOT_LAG).
    assert {place.as_of for place in places.values() if place is not None} == {
        now - timedelta(seconds=7) - job_service.QUEUE_SNAPSHOT_LAG
    }
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
    assert _place(settings, jobs[0]) is None  # not queued any more


def test_nothing_after_the_minute_moves_the_answer_until_the_next_one(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another tenant's job starting at T + 10 s, a cancel at T + 20 s, a job that started at
    T − 30 s put back in the queue at T + 40 s after its worker was lost and started again at
    T + 48 s, and submissions at T + 50 s and T + 52 s: the answer stays that of T until the
    snapshot moves to T + 60 s, and then changes. Reads are made a minute after the events'
    clock: the snapshot of a read at time t is floor(t) − 60 s (QUEUE_SNAPSHOT_LAG), so the
    answers read from T + 60 s to T + 120 s are those of T."""
    factory = get_session_factory(settings.sqlalchemy_url)
    a, b, c = _tenants(settings, 3)
    a1, b0, b1, a2, c1 = (_submit(settings, t) for t in (a, b, b, a, c))
    minute = _next_minute()  # T
    clock = {"now": minute}
    monkeypatch.setattr(execution, "utcnow", lambda: clock["now"])
    lag = job_service.QUEUE_SNAPSHOT_LAG
    monkeypatch.setattr(job_service, "queue_clock", lambda: clock["now"] + lag)

    def at(seconds: float) -> datetime:
        clock["now"] = minute + timedelta(seconds=seconds)
        return clock["now"]

    def counts(job_id: uuid.UUID, as_of: datetime = minute) -> tuple[int, int]:
        place = _place(settings, job_id)
        assert place is not None and place.as_of == as_of
        return place.position, place.jobs_ahead

    def claim(seconds: float, expected: uuid.UUID) -> None:
        at(seconds)
        claimed = claim_next_and_charge(factory, settings, expected)
        assert claimed is not None and claimed.job_id == expected

    claim(-30, a1)  # A's oldest: nothing runs, nothing started, A submitted first
    claim(-20, b0)  # A runs one
    with transaction(factory) as session:
        assert job_repository.complete(session, b0, 1, output_key="x", output_rows=1, now=at(-15))
    at(5)
    # At T: C never started, B started last at T − 20 s, A runs a1: the order is C, B, A.
    assert counts(b1) == (1, 1)  # behind c1
    assert counts(a2) == (1, 2)
    claim(10, c1)  # another tenant's job starts
    at(15)
    assert counts(b1) == (1, 1)
    with transaction(factory) as session:  # a2 cancelled
        assert job_repository.cancel_queued(session, a2, now=at(20), reason=None) is not None
    at(25)
    assert counts(b1) == (1, 1)
    with transaction(factory) as session:  # a1's worker lost: back in the queue
        outcome = job_repository.recover_expired(
            session, a1, now=at(40), max_attempts=3, time_limit_error="x"
        )
        assert outcome == "requeued"
    at(45)
    assert counts(b1) == (1, 1)  # a1 ran at T, so A still comes after B
    claim(48, a1)  # a1 again (A last started before B)
    monkeypatch.setattr(job_service, "utcnow", lambda: at(50))
    c2 = _submit(settings, c)
    monkeypatch.setattr(job_service, "utcnow", lambda: at(52))
    c3 = _submit(settings, c)
    at(55)
    assert counts(b1) == (1, 1)
    # Submitted after T: counted at the end of its tenant's queue of T (behind c1) with its
    # tenant's submissions since T, and before the jobs of B and A that the order starts after
    # C's (min(1, p − 1) each).
    assert counts(c2) == (2, 3)
    assert counts(c3) == (3, 4)
    at(59.999999)
    assert counts(b1) == (1, 1)
    at(60)
    # At T + 60 s: A has nothing queued; c1 runs, so B comes before C.
    later = minute + timedelta(seconds=60)
    assert counts(b1, later) == (1, 0)
    assert counts(c2, later) == (1, 1)
    assert counts(c3, later) == (2, 2)
    assert _place(settings, a1) is None  # running


def test_a_read_counts_a_jobs_place_once_per_minute(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GET /v1/jobs/{id}'s view (``job_read``, both of its paths) counts a queued job's place
    once per job and minute in a process: a burst of reads of one job costs one count."""
    (a,) = _tenants(settings, 1)
    first, second = _submit(settings, a), _submit(settings, a)
    minute = _next_minute()
    lag = job_service.QUEUE_SNAPSHOT_LAG
    clock = {"now": minute + lag + timedelta(seconds=1)}
    monkeypatch.setattr(job_service, "queue_clock", lambda: clock["now"])
    counted: list[uuid.UUID] = []
    count = job_service.queue_out

    def counting(session: Session, job: Job, now: datetime | None = None) -> QueueOut | None:
        counted.append(job.id)
        return count(session, job, now)

    monkeypatch.setattr(job_service, "queue_out", counting)
    principal = a[0]

    def read(job_id: uuid.UUID) -> QueueOut | None:
        with transaction(get_session_factory(settings.sqlalchemy_url)) as session:
            return job_service.job_read(session, principal, job_id).queue

    places = [read(second) for _ in range(5)] + [read(first)]
    assert counted == [second, first]
    assert places[0] == QueueOut(as_of=minute, position=2, jobs_ahead=1) and places[5] is not None
    assert all(place == places[0] for place in places[:5])
    clock["now"] = minute + lag + timedelta(seconds=60)
    assert read(second) == QueueOut(as_of=clock["now"] - lag, position=2, jobs_ahead=1)
    assert counted == [second, first, second]
    # A read that began in the older minute and stores its count late does not evict the newer
    # minute's counts (they would be counted again: one more first count at a chosen time).
    job_service._places.put(minute, first, None)
    assert read(second) == QueueOut(as_of=clock["now"] - lag, position=2, jobs_ahead=1)
    assert counted == [second, first, second]


def test_another_tenants_submissions_after_the_minute_do_not_count(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The asking job's own tenant's submissions after T count (their times are shown to that
    tenant's keys); another tenant's do not, until the snapshot reaches them."""
    a, b = _tenants(settings, 2)
    _submit(settings, b)  # b0
    _submit(settings, a)  # a0
    minute = _next_minute()  # T: b0 and a0 queued; B comes first (its job is older)
    lag = job_service.QUEUE_SNAPSHOT_LAG
    clock = {"now": minute + lag + timedelta(seconds=5)}
    monkeypatch.setattr(job_service, "queue_clock", lambda: clock["now"])
    monkeypatch.setattr(job_service, "utcnow", lambda: minute + timedelta(seconds=20))
    _submit(settings, b)  # b1, B at T + 20 s
    monkeypatch.setattr(job_service, "utcnow", lambda: minute + timedelta(seconds=30))
    a1 = _submit(settings, a)  # A at T + 30 s
    # a1 is second in A's queue (a0, then its own later submission); of B, the order takes
    # min(q_B, 2) before it, and at T B had one job queued: 1 + 1 ahead, not 1 + 2.
    assert _place(settings, a1) == QueueOut(as_of=minute, position=2, jobs_ahead=2)
    clock["now"] = minute + 2 * lag  # the snapshot reaches T + 60 s: b1 counts now
    assert _place(settings, a1) == QueueOut(as_of=minute + lag, position=2, jobs_ahead=3)
