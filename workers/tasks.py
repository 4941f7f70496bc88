"""Celery tasks: thin. An id in, the execution service called, the result recorded by it."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any

from celery import Task
from celery.signals import worker_init, worker_process_init, worker_ready, worker_shutdown
from sqlalchemy import exc

from app.config import get_settings
from app.db.session import dispose_engines
from app.jobs.execution import execute_job
from app.jobs.limits import effective_memory_limit_mb, record_enforced_memory_limit
from app.jobs.owner_tier import build_owner_tier, resend_owner_tiers
from app.jobs.recovery import recover_jobs
from app.jobs.sweep import sweep_storage
from app.samples.execution import execute_sample
from app.samples.recovery import expire_samples, recover_samples
from app.webhooks.delivery import deliver_due, ring_if_due
from workers.celery_app import (
    BUILD_OWNER_TIER_TASK,
    DELIVER_WEBHOOKS_TASK,
    RUN_JOB_TASK,
    RUN_SAMPLE_TASK,
    get_celery_app,
)
from workers.limits import apply_memory_limit

logger = logging.getLogger(__name__)

celery_app = get_celery_app(get_settings())
_stop_recovery = threading.Event()
# Job processes of this worker (Celery's concurrency), recorded in the main process before the
# pool forks; each pool process sizes its memory limit by it.
_pool_size = 1


class _RetriedWhileDatabaseIsDown(Task):  # type: ignore[type-arg]
    """A message that finds the database unreachable is tried again with Celery's own
    exponential backoff (1, 2, 4, 8, 16, then 30 s; 30 tries, about 14 minutes) instead of
    being acknowledged and left to the recovery loop's resend (issue 24 §10: jobs waited 300 s
    after a short outage). Safe: the database, not the message, decides what a delivery does
    (claims, leases)."""

    autoretry_for = (exc.OperationalError, exc.InterfaceError, exc.TimeoutError)
    retry_backoff = 1
    retry_backoff_max = 30
    retry_jitter = False
    max_retries = 30
    acks_late = True
    reject_on_worker_lost = True
    ignore_result = True

    def on_retry(
        self, error: BaseException, task_id: str, args: Any, kwargs: Any, einfo: Any
    ) -> None:
        logger.warning(
            "%s %s: database unreachable (%s); retrying", self.name, args, type(error).__name__
        )


@celery_app.task(name=RUN_JOB_TASK, base=_RetriedWhileDatabaseIsDown)
def run_job(job_id: str) -> str:
    """Run one attempt of a job. Returns the outcome; safe to deliver any number of times."""
    outcome = execute_job(get_settings(), uuid.UUID(job_id))
    return outcome.status


@celery_app.task(name=RUN_SAMPLE_TASK, base=_RetriedWhileDatabaseIsDown)
def run_sample(sample_id: str) -> str:
    """Draw one derived sample from a job's model (no privacy cost). Safe to deliver again."""
    return execute_sample(get_settings(), uuid.UUID(sample_id))


@celery_app.task(
    name=BUILD_OWNER_TIER_TASK, base=_RetriedWhileDatabaseIsDown, reject_on_worker_lost=False
)
def build_owner_tier_task(job_id: str) -> str:
    """Build a published job's owner tier (reads the real table; the reports queue only, so it
    never holds a job worker's slot). Safe to deliver again. A build whose process dies is not
    put back at once (it would die again in a loop): its try is counted and the recovery loop
    resends it after RHOSYNTH_REQUEUE_AFTER_SECONDS."""
    return build_owner_tier(get_settings(), uuid.UUID(job_id))


@celery_app.task(
    name=DELIVER_WEBHOOKS_TASK, base=_RetriedWhileDatabaseIsDown, reject_on_worker_lost=False
)
def deliver_webhooks(event_id: str) -> int:
    """Send every due webhook delivery (the webhooks queue only: a slow receiver never holds a
    job worker's slot). ``event_id`` is the event that rang, a hint only: the pass sends whatever
    is due, in order per job. Safe to deliver any number of times (claims are in the database).
    Returns how many were delivered."""
    return deliver_due(get_settings()).delivered


@worker_init.connect
def _record_pool_size(sender: Any = None, **_kwargs: Any) -> None:
    global _pool_size
    _pool_size = max(1, int(getattr(sender, "concurrency", None) or 1))
    settings = get_settings()
    limit = effective_memory_limit_mb(settings.job_memory_limit_mb, _pool_size)
    if limit < settings.job_memory_limit_mb:
        logger.warning(
            "job memory limit lowered from %d MB (RHOSYNTH_JOB_MEMORY_LIMIT_MB) to %d MB so that "
            "%d job processes fit in 80%% of this machine's memory",
            settings.job_memory_limit_mb,
            limit,
            _pool_size,
        )


@worker_process_init.connect
def _prepare_pool_process(**_kwargs: Any) -> None:
    # A forked pool process must not reuse the parent's pooled database sockets.
    dispose_engines()
    settings = get_settings()
    limit_mb = effective_memory_limit_mb(settings.job_memory_limit_mb, _pool_size)
    try:
        enforced = apply_memory_limit(limit_mb) is not None
    except Exception:
        logger.exception("could not set the job memory limit; jobs run without one")
        enforced = False
    record_enforced_memory_limit(limit_mb if enforced else None)


def _recovery_loop() -> None:
    settings = get_settings()
    next_sweep = 0.0
    while not _stop_recovery.is_set():
        try:
            recover_jobs(settings)
        except Exception:
            logger.exception("job recovery pass failed")
        try:
            recover_samples(settings)
        except Exception:
            logger.exception("sample recovery pass failed")
        try:
            resend_owner_tiers(settings)
        except Exception:
            logger.exception("owner-tier recovery pass failed")
        try:
            # Deliveries whose message was lost or whose backoff has run out.
            ring_if_due(settings)
        except Exception:
            logger.exception("webhook sweep failed")
        if time.monotonic() >= next_sweep:
            next_sweep = time.monotonic() + settings.storage_sweep_interval_seconds
            try:
                # Retention is counted in days: the sweep's interval (an hour) is fine enough,
                # and the recovery passes, every few seconds, need not open storage for it.
                expire_samples(settings)
            except Exception:
                logger.exception("sample retention pass failed")
            try:
                sweep_storage(settings)
            except Exception:
                logger.exception("storage sweep failed")
        _stop_recovery.wait(settings.recovery_interval_seconds)


@worker_ready.connect
def _start_recovery(**_kwargs: Any) -> None:
    _stop_recovery.clear()
    threading.Thread(target=_recovery_loop, name="rhosynth-recovery", daemon=True).start()


@worker_shutdown.connect
def _stop_recovery_loop(**_kwargs: Any) -> None:
    _stop_recovery.set()
