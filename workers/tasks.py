"""Celery tasks: thin. An id in, the execution service called, the result recorded by it."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any

from celery.signals import worker_process_init, worker_ready, worker_shutdown

from app.config import get_settings
from app.db.session import dispose_engines
from app.jobs.execution import execute_job
from app.jobs.recovery import recover_jobs
from app.jobs.sweep import sweep_storage
from workers.celery_app import RUN_JOB_TASK, get_celery_app

logger = logging.getLogger(__name__)

celery_app = get_celery_app(get_settings())
_stop_recovery = threading.Event()


@celery_app.task(name=RUN_JOB_TASK, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def run_job(job_id: str) -> str:
    """Run one attempt of a job. Returns the outcome; safe to deliver any number of times."""
    outcome = execute_job(get_settings(), uuid.UUID(job_id))
    return outcome.status


@worker_process_init.connect
def _fresh_connections(**_kwargs: Any) -> None:
    # A forked pool process must not reuse the parent's pooled database sockets.
    dispose_engines()


def _recovery_loop() -> None:
    settings = get_settings()
    next_sweep = 0.0
    while not _stop_recovery.is_set():
        try:
            recover_jobs(settings)
        except Exception:
            logger.exception("job recovery pass failed")
        if time.monotonic() >= next_sweep:
            next_sweep = time.monotonic() + settings.storage_sweep_interval_seconds
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
