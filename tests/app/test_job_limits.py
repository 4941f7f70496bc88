"""The pieces of the per-job limits that need no worker process: the lease thread ending an
attempt that ignores its deadline, the progress callback refusing to go on past it, and how a
memory failure is recognised."""

from __future__ import annotations

import dataclasses
import time
import uuid
from datetime import timedelta

import pytest

from app.config import JOB_SOFT_GRACE_SECONDS
from app.db.base import utcnow
from app.db.session import get_session_factory
from app.jobs.execution import _Lease, _Progress, claim_and_charge
from app.jobs.limits import (
    JobTimeLimitExceeded,
    caused_by_memory_error,
    effective_memory_limit_mb,
    physical_memory_mb,
)
from tests.conftest import Tenant
from tests.support.api import create_dataset, submit
from tests.support.stack import Stack


def test_an_attempt_that_ignores_its_deadline_is_ended_by_its_lease_thread(
    api_stack: Stack, tenant: Tenant, people_csv: bytes, people_schema: str
) -> None:
    """The engine reports no progress and nothing interrupts it: JOB_SOFT_GRACE_SECONDS after
    the deadline the lease thread ends the job failed, so it can no longer publish."""
    settings = api_stack.settings
    dataset = create_dataset(tenant.owner, people_csv, people_schema)
    job_id = submit(tenant.analyst, dataset["id"], rho="0.1").json()["id"]
    factory = get_session_factory(settings.sqlalchemy_url)
    claim = claim_and_charge(factory, settings, uuid.UUID(job_id))
    assert claim is not None
    late = dataclasses.replace(
        claim, deadline_at=utcnow() - timedelta(seconds=JOB_SOFT_GRACE_SECONDS + 1)
    )
    with _Lease(factory, settings, late) as lease:
        assert lease.past_deadline()
        deadline = time.monotonic() + 10 * settings.job_heartbeat_seconds
        while time.monotonic() < deadline:
            if tenant.analyst.get(f"/v1/jobs/{job_id}").json()["status"] != "running":
                break
            time.sleep(0.1)
        progress = _Progress(factory, settings, late, lease)
        with pytest.raises(JobTimeLimitExceeded):
            progress(0.5, "estimate")
    job = tenant.analyst.get(f"/v1/jobs/{job_id}").json()
    assert job["status"] == "failed"
    assert job["error"] == (
        f"the job exceeded its time limit of {settings.job_time_limit_seconds} s; "
        "its budget stays spent"
    )


def test_a_memory_error_is_recognised_through_wrapping() -> None:
    def wrapped_by_cause() -> None:
        try:
            raise MemoryError
        except MemoryError as error:
            raise RuntimeError("driver error") from error

    def wrapped_by_context() -> None:
        try:
            raise MemoryError
        except MemoryError:
            raise ValueError("while handling") from None

    def plain() -> None:
        raise ValueError("not memory")

    outcomes = []
    for raiser in (wrapped_by_cause, wrapped_by_context, plain):
        try:
            raiser()
        except Exception as error:
            outcomes.append(caused_by_memory_error(error))
    # ``from None`` suppresses the context for display only; it is still the cause of failure.
    assert outcomes == [True, True, False]


def test_effective_memory_limit_fits_the_machine() -> None:
    total = physical_memory_mb()
    assert total is not None
    assert effective_memory_limit_mb(64, 1) == 64
    assert effective_memory_limit_mb(10 * total, 1) == int(0.8 * total)
    assert effective_memory_limit_mb(10 * total, 4) == int(0.8 * total / 4)
