"""Recovering derived samples whose worker or message was lost (run with the jobs' recovery)."""

from __future__ import annotations

import uuid
from datetime import timedelta

from app.config import Settings
from app.db.base import utcnow
from app.db.session import get_session_factory, transaction
from app.jobs import dispatch
from app.jobs.recovery import expired_in_pages
from app.samples import repository
from app.storage import discard, open_storage
from workers.celery_app import RUN_SAMPLE_TASK

EXPIRY_BATCH = 500

SAMPLE_LOST = "the sample's worker stopped responding on every attempt; it cost nothing"


def recover_samples(settings: Settings) -> list[uuid.UUID]:
    """Requeue (or fail, after ``job_max_attempts``) samples whose lease ran out, and resend the
    messages of samples queued too long. Returns the samples whose message was sent."""
    factory = get_session_factory(settings.sqlalchemy_url)
    sent: list[uuid.UUID] = []
    for sample_id in expired_in_pages(factory, repository.expired_running):
        with transaction(factory) as session:
            outcome = repository.recover_expired(
                session,
                sample_id,
                now=utcnow(),
                max_attempts=settings.job_max_attempts,
                error=SAMPLE_LOST,
            )
        if outcome == "requeued":
            dispatch.enqueue_job(settings, sample_id, RUN_SAMPLE_TASK)
            sent.append(sample_id)
    with transaction(factory) as session:
        now = utcnow()
        stale = repository.touch_stale_queued(
            session, now=now, older_than=now - timedelta(seconds=settings.requeue_after_seconds)
        )
    for sample_id in stale:
        dispatch.enqueue_job(settings, sample_id, RUN_SAMPLE_TASK)
        sent.append(sample_id)
    return sent


def expire_samples(settings: Settings) -> list[uuid.UUID]:
    """Mark succeeded samples that finished more than ``RHOSYNTH_SAMPLE_RETENTION_DAYS`` ago
    ``expired`` and delete their outputs (after each batch commits; what a failed delete leaves
    is removed by the storage sweep). Returns the samples expired."""
    factory = get_session_factory(settings.sqlalchemy_url)
    storage = open_storage(settings)
    cutoff = utcnow() - timedelta(days=settings.sample_retention_days)
    expired: list[uuid.UUID] = []
    while True:
        with transaction(factory) as session:
            batch = repository.expire_finished_before(session, cutoff, EXPIRY_BATCH)
        for sample_id, key in batch:
            discard(storage, key)
            expired.append(sample_id)
        if len(batch) < EXPIRY_BATCH:
            return expired
