"""Recovering jobs whose worker or message was lost, and expiring jobs queued too long.

Runs periodically in every worker process's parent (and on demand from the CLI). Every step is a
guarded UPDATE, so several workers running it at once do no harm.

* A running job whose lease ran out (its worker died) goes back to the queue, still charged, for
  a fresh attempt with fresh noise; after ``job_max_attempts`` attempts it is marked failed.
  It is never charged twice: the charge is recorded once, at the first claim. An attempt whose
  last lease ran to its deadline or past it (Celery's hard time limit killed it) is not retried:
  the job is marked failed with the time-limit text.
* A queued job whose message may have been lost (queued for longer than
  ``requeue_after_seconds``) gets its message sent again; a duplicate message is harmless
  because only one claim can succeed.
* A job still queued after ``queued_job_ttl_seconds`` is cancelled; its reservation is released
  if it was never charged.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy.orm import Session, sessionmaker

from app.budget import service as budget_service
from app.config import Settings
from app.db.base import utcnow
from app.db.session import get_session_factory, transaction
from app.jobs import approvals, dispatch, repository
from app.jobs.limits import time_limit_error
from app.webhooks import outbox

logger = logging.getLogger(__name__)

SYSTEM_ACTOR = "system"
_PAGE = 100


@dataclass
class RecoveryReport:
    requeued: list[uuid.UUID] = field(default_factory=list)
    failed: list[uuid.UUID] = field(default_factory=list)
    timed_out: list[uuid.UUID] = field(default_factory=list)
    cancelled: list[uuid.UUID] = field(default_factory=list)
    resent: list[uuid.UUID] = field(default_factory=list)
    expired: list[uuid.UUID] = field(default_factory=list)
    # Jobs that waited for an owner's approval too long (issue 27 §3): expired, released.
    unapproved: list[uuid.UUID] = field(default_factory=list)


LeaseKey = tuple[datetime, uuid.UUID]


def expired_in_pages(
    factory: sessionmaker[Session],
    fetch: Callable[[Session, datetime, int, LeaseKey | None], list[LeaseKey]],
) -> Iterator[uuid.UUID]:
    """Every id whose lease had run out when the walk started, in pages of ``_PAGE``.

    ``fetch(session, now, limit, after)`` returns the (lease end, id) keys after ``after`` in
    order (keyset paging from a fixed ``now``): each is seen once, however many leases expired
    (a single page per pass left the rest behind a backlog indefinitely). Jobs and derived
    samples both recover through it.
    """
    now = utcnow()
    after: LeaseKey | None = None
    while True:
        with transaction(factory) as session:
            page = fetch(session, now, _PAGE, after)
        for _, item_id in page:
            yield item_id
        if len(page) < _PAGE:
            return
        after = page[-1]


def recover_jobs(settings: Settings) -> RecoveryReport:
    factory = get_session_factory(settings.sqlalchemy_url)
    report = RecoveryReport()

    for job_id in expired_in_pages(factory, repository.expired_running):
        with transaction(factory) as session:
            outcome = repository.recover_expired(
                session,
                job_id,
                now=utcnow(),
                max_attempts=settings.job_max_attempts,
                time_limit_error=time_limit_error(settings.job_time_limit_seconds),
            )
            if outcome in ("failed", "timed_out", "cancelled"):
                outbox.record_job_ended(session, job_id, settings)
        if outcome == "requeued":
            report.requeued.append(job_id)
            dispatch.enqueue_job(settings, job_id)
        elif outcome == "failed":
            report.failed.append(job_id)
        elif outcome == "timed_out":
            report.timed_out.append(job_id)
        elif outcome == "cancelled":
            report.cancelled.append(job_id)

    if settings.tenant_max_running is not None and (
        report.failed or report.timed_out or report.cancelled
    ):
        # A running slot of a capped tenant freed without an attempt ending in a worker (which
        # would have rung itself): one more message, in case that tenant's jobs lost theirs.
        with transaction(factory) as session:
            waiting = repository.oldest_queued(session)
        if waiting is not None:
            dispatch.enqueue_job(settings, waiting)

    now = utcnow()
    with transaction(factory) as session:
        deadline = now - timedelta(seconds=settings.queued_job_ttl_seconds)
        expired = repository.expired_queued(session, created_before=deadline)
    for job_id in expired:
        with transaction(factory) as session:
            job = repository.cancel_queued(
                session, job_id, now=utcnow(), reason="the job expired while queued"
            )
            if job is not None:
                if job.charged_at is None:
                    budget_service.release_reservation(
                        session, job.dataset_id, job.rho, job.id, SYSTEM_ACTOR
                    )
                outbox.record_job_ended(session, job_id, settings)
                report.expired.append(job_id)

    report.unapproved.extend(approvals.expire_pending(factory, settings))

    with transaction(factory) as session:
        now = utcnow()
        stale = repository.touch_stale_queued(
            session, now=now, older_than=now - timedelta(seconds=settings.requeue_after_seconds)
        )
    for job_id in stale:
        dispatch.enqueue_job(settings, job_id)
        report.resent.append(job_id)

    outcomes = (report.requeued, report.failed, report.timed_out, report.cancelled)
    if any((*outcomes, report.resent, report.expired, report.unapproved)):
        logger.info(
            "recovery: requeued=%d failed=%d timed_out=%d cancelled=%d resent=%d expired=%d "
            "unapproved=%d",
            len(report.requeued),
            len(report.failed),
            len(report.timed_out),
            len(report.cancelled),
            len(report.resent),
            len(report.expired),
            len(report.unapproved),
        )
    return report
