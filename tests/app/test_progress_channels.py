"""The worker's two progress channels as keys see them: detail progress reaches owners only,
public progress moves only at points of the public schedule, and a lost attempt's progress does
not stay visible once its job is requeued (docs/privacy.md, "What analysts see and never see").

The worker's progress writer is driven directly here, on a job claimed with the worker's own
claim, so every state is reached deterministically (no worker process, no timing).
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from sqlalchemy import update

from app.db.base import utcnow
from app.db.session import get_session_factory
from app.jobs.execution import _Lease, _Progress, claim_and_charge
from app.jobs.models import Job
from app.jobs.progress import ENGINE_SHARE, public_schedule
from app.jobs.recovery import recover_jobs
from engine.mechanisms import MECHANISMS
from tests.conftest import Tenant
from tests.support.api import create_dataset, submit
from tests.support.stack import Stack

WORKER_LOST = "the job's worker stopped responding on every attempt; its budget stays spent"


def _views(tenant: Tenant, job_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    analyst = tenant.analyst.get(f"/v1/jobs/{job_id}").json()
    owner = tenant.owner.get(f"/v1/jobs/{job_id}").json()
    return analyst, owner


def _claimed_progress(stack: Stack, job_id: str) -> _Progress:
    settings = stack.settings
    factory = get_session_factory(settings.sqlalchemy_url)
    claim = claim_and_charge(factory, settings, uuid.UUID(job_id))
    assert claim is not None
    # The lease thread is not started: its flags stay "not lost, no cancel".
    return _Progress(factory, settings, claim, _Lease(factory, settings, claim))


def _expire_lease(stack: Stack, job_id: str) -> None:
    with stack.session() as session:
        session.execute(
            update(Job)
            .where(Job.id == uuid.UUID(job_id))
            .values(lease_expires_at=utcnow() - timedelta(seconds=1))
        )


def test_detail_progress_reaches_owners_only_and_public_moves_at_milestones(
    api_stack: Stack, tenant: Tenant, people_csv: bytes, people_schema: str
) -> None:
    dataset = create_dataset(tenant.owner, people_csv, people_schema)
    job_id = submit(tenant.analyst, dataset["id"], rho="0.2", method="aim").json()["id"]
    progress = _claimed_progress(api_stack, job_id)
    schedule = [(p.fraction, p.stage) for p in public_schedule("aim")]

    # A noise-dependent detail report (an AIM round's fraction) changes nothing analysts see.
    progress(0.4321, "select")
    analyst, owner = _views(tenant, job_id)
    assert analyst["progress"] == {"fraction": 0.0, "stage": "starting"}
    assert analyst["progress_detail"] is None
    assert owner["progress"] == analyst["progress"]
    assert owner["progress_detail"] == {"fraction": 0.4105, "stage": "select"}  # 0.95 · 0.4321

    # A milestone moves the public progress to its fixed point; later detail leaves it there.
    progress.milestone(0.02, "adaptive_rounds")
    progress(0.7, "estimate")
    analyst, owner = _views(tenant, job_id)
    expected = {"fraction": 0.019, "stage": "adaptive_rounds"}
    assert (expected["fraction"], expected["stage"]) in schedule
    assert analyst["progress"] == owner["progress"] == expected
    assert analyst["progress_detail"] is None
    assert owner["progress_detail"] == {"fraction": 0.665, "stage": "estimate"}

    progress.phase("write")
    analyst, owner = _views(tenant, job_id)
    assert analyst["progress"] == {"fraction": ENGINE_SHARE, "stage": "write"}
    assert owner["progress_detail"] == analyst["progress"]


def test_queued_job_shows_queued_to_both_and_detail_to_owners_only(
    api_stack: Stack, tenant: Tenant, people_csv: bytes, people_schema: str
) -> None:
    dataset = create_dataset(tenant.owner, people_csv, people_schema)
    job_id = submit(tenant.analyst, dataset["id"], rho="0.1").json()["id"]
    analyst, owner = _views(tenant, job_id)
    assert analyst["progress"] == owner["progress"] == {"fraction": 0.0, "stage": "queued"}
    assert analyst["progress_detail"] is None
    assert owner["progress_detail"] == {"fraction": 0.0, "stage": "queued"}
    listed = tenant.analyst.get(f"/v1/datasets/{dataset['id']}/jobs").json()["items"]
    assert [item["progress_detail"] for item in listed] == [None]


def test_requeued_job_shows_public_queued_again_then_a_fixed_failure(
    api_stack: Stack, tenant: Tenant, people_csv: bytes, people_schema: str
) -> None:
    dataset = create_dataset(tenant.owner, people_csv, people_schema)
    job_id = submit(tenant.analyst, dataset["id"], rho="0.3", method="aim").json()["id"]
    settings = api_stack.settings
    schedule = [(p.fraction, p.stage) for p in public_schedule("aim")]

    for attempt in range(1, settings.job_max_attempts + 1):
        progress = _claimed_progress(api_stack, job_id)
        progress(0.5 + attempt / 100, "estimate")  # the lost attempt's noise-dependent trace
        if attempt == settings.job_max_attempts:
            progress.milestone(0.02, "adaptive_rounds")
        _expire_lease(api_stack, job_id)  # its worker died
        report = recover_jobs(settings)
        analyst, owner = _views(tenant, job_id)
        if attempt < settings.job_max_attempts:
            assert uuid.UUID(job_id) in report.requeued
            assert analyst["status"] == "queued"
            # Nothing of the lost attempt stays visible to analysts.
            assert analyst["progress"] == {"fraction": 0.0, "stage": "queued"}
            assert analyst["progress_detail"] is None
            assert owner["progress_detail"] == {"fraction": 0.0, "stage": "requeued"}
            assert analyst["error"] is None and analyst["output_rows"] is None
        else:
            assert uuid.UUID(job_id) in report.failed

    assert analyst["status"] == "failed"
    assert analyst["error"] == WORKER_LOST
    assert analyst["progress"]["stage"] == "failed"
    # The fraction is the last public point the last attempt reached.
    assert (analyst["progress"]["fraction"], "adaptive_rounds") in schedule
    assert analyst["progress_detail"] is None
    assert owner["progress_detail"]["stage"] == "failed"
    assert tenant.analyst.get(f"/v1/jobs/{job_id}/output").status_code == 409


def test_public_schedule_has_distinct_stages_for_every_method() -> None:
    for method in MECHANISMS:
        schedule = public_schedule(method)
        stages = [p.stage for p in schedule]
        assert len(set(stages)) == len(stages), method
        fractions = [p.fraction for p in schedule]
        assert fractions == sorted(fractions) and fractions[-1] == 1.0, method
        assert not {"failed", "cancelled", "requeued"} & set(stages), method
