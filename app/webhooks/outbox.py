"""The outbox: events written in the transaction of the state change that causes them.

Each ``record_*`` function is called right after the guarded UPDATE that made the change, in the
same session, so the event row commits if and only if the change does. It snapshots the payload
(what an analyst of the tenant may see, built by the same serializers as the analyst's GET) and
adds one pending delivery per subscription that wants the event. With ``settings`` it also rings
the delivery worker after the commit; without, the periodic sweep finds the delivery within
``RHOSYNTH_RECOVERY_INTERVAL_SECONDS``.
"""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any

from sqlalchemy.orm import Session

from app.auth.service import Principal
from app.config import Settings
from app.datasets import repository as dataset_repository
from app.db.base import new_id, utcnow
from app.jobs import repository as job_repository
from app.jobs.models import Job
from app.samples import repository as sample_repository
from app.webhooks import repository
from app.webhooks.delivery import ring
from app.webhooks.models import WebhookEvent

JOB_EVENTS = {"succeeded": "job.succeeded", "failed": "job.failed", "cancelled": "job.cancelled"}


def _analyst_view(job: Job) -> Principal:
    """Who a payload is written for: any analyst key of the job's tenant (privacy rule 6)."""
    return Principal(
        key_id=uuid.UUID(int=0), tenant_id=job.tenant_id, role="analyst", name="webhook"
    )


def job_links(job_id: uuid.UUID, succeeded: bool) -> dict[str, str]:
    links = {"self": f"/v1/jobs/{job_id}"}
    if succeeded:
        links |= {
            "output": f"/v1/jobs/{job_id}/output",
            "report": f"/v1/jobs/{job_id}/report",
            "measurements": f"/v1/jobs/{job_id}/measurements",
        }
    return links


def _write(
    session: Session,
    settings: Settings | None,
    *,
    tenant_id: uuid.UUID,
    event_type: str,
    ordering_key: uuid.UUID | None,
    data: dict[str, Any],
    subscription_ids: list[uuid.UUID],
) -> WebhookEvent | None:
    if not subscription_ids:
        return None
    now = utcnow()
    public_id = new_id()
    payload = {
        "id": str(public_id),
        "type": event_type,
        "created_at": now.isoformat(),
        "data": data,
    }
    return repository.add_event(
        session,
        public_id=public_id,
        tenant_id=tenant_id,
        event_type=event_type,
        ordering_key=ordering_key,
        payload=payload,
        subscription_ids=subscription_ids,
        now=now,
        after_commit_ring=None if settings is None else lambda: ring(settings, public_id),
    )


def record_job_ended(
    session: Session, job_id: uuid.UUID, settings: Settings | None = None
) -> WebhookEvent | None:
    """After a job became succeeded, failed or cancelled in ``session``: its event."""
    session.flush()
    job = job_repository.get(session, job_id)
    if job is None:
        return None
    session.refresh(job)
    event_type = JOB_EVENTS.get(job.status)
    if event_type is None:
        return None
    # Imported here: app/jobs/service.py records its cancellations through this module.
    from app.jobs.service import job_out

    subscribers = repository.subscribers(session, job.tenant_id, event_type)
    view = job_out(job, _analyst_view(job))
    return _write(
        session,
        settings,
        tenant_id=job.tenant_id,
        event_type=event_type,
        ordering_key=job.id,
        data={
            "job": view.model_dump(mode="json"),
            "links": job_links(job.id, job.status == "succeeded"),
        },
        subscription_ids=[s.id for s in subscribers],
    )


APPROVAL_DECISIONS = ("queued", "rejected", "expired")
"""The states an owner's decision (or its absence) leaves a pending job in."""


def record_approval(
    session: Session, job_id: uuid.UUID, settings: Settings | None = None
) -> WebhookEvent | None:
    """After a job entered ``pending_approval`` (``approval.requested``) or left it by an
    approval, a rejection or an expiry (``approval.decided``) in ``session``: its event, ordered
    with the job's other events. The payload is the analyst's job view, which carries the
    decision (its status, ``decided_at`` and ``decision_reason``)."""
    session.flush()
    job = job_repository.get(session, job_id)
    if job is None:
        return None
    session.refresh(job)
    if job.status == "pending_approval":
        event_type = "approval.requested"
    elif job.status in APPROVAL_DECISIONS and job.decided_at is not None:
        event_type = "approval.decided"
    else:
        return None
    from app.jobs.service import job_out  # see record_job_ended

    subscribers = repository.subscribers(session, job.tenant_id, event_type)
    view = job_out(job, _analyst_view(job))
    return _write(
        session,
        settings,
        tenant_id=job.tenant_id,
        event_type=event_type,
        ordering_key=job.id,
        data={"job": view.model_dump(mode="json"), "links": job_links(job.id, False)},
        subscription_ids=[s.id for s in subscribers],
    )


def record_sample_ready(
    session: Session, sample_id: uuid.UUID, settings: Settings | None = None
) -> WebhookEvent | None:
    """After a derived sample was published in ``session``: ``sample.ready`` (ordered with its
    job's events)."""
    session.flush()
    sample = sample_repository.get(session, sample_id)
    if sample is None:
        return None
    session.refresh(sample)
    subscribers = repository.subscribers(session, sample.tenant_id, "sample.ready")
    from app.samples.service import sample_out  # imports app/jobs/service.py (see above)

    view = sample_out(sample)
    return _write(
        session,
        settings,
        tenant_id=sample.tenant_id,
        event_type="sample.ready",
        ordering_key=sample.job_id,
        data={
            "sample": view.model_dump(mode="json"),
            "links": {
                "self": f"/v1/samples/{sample.id}",
                "output": f"/v1/samples/{sample.id}/output",
                "job": f"/v1/jobs/{sample.job_id}",
            },
        },
        subscription_ids=[s.id for s in subscribers],
    )


def record_budget_change(
    session: Session,
    dataset_id: uuid.UUID,
    *,
    before: Decimal,
    after: Decimal,
    settings: Settings | None = None,
) -> list[WebhookEvent]:
    """After a dataset's remaining ρ went from ``before`` to ``after``: one
    ``budget.below_threshold`` event per subscription whose threshold it crossed downwards
    (each carries its own threshold). The remaining ρ is public to the dataset's keys."""
    events: list[WebhookEvent] = []
    dataset = dataset_repository.get(session, dataset_id)
    if after >= before or dataset is None:
        return events
    tenant_id = dataset.tenant_id
    for subscription in repository.threshold_crossings(session, tenant_id, before, after):
        assert subscription.budget_threshold_rho is not None
        event = _write(
            session,
            settings,
            tenant_id=tenant_id,
            event_type="budget.below_threshold",
            ordering_key=None,
            data={
                "dataset_id": str(dataset_id),
                "remaining_rho": _decimal_text(after),
                "threshold_rho": _decimal_text(subscription.budget_threshold_rho),
                "links": {"dataset": f"/v1/datasets/{dataset_id}"},
            },
            subscription_ids=[subscription.id],
        )
        if event is not None:
            events.append(event)
    return events


def _decimal_text(value: Decimal) -> str:
    return format(value.normalize(), "f")
