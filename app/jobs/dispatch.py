"""Ringing the doorbell: tell the workers a job is waiting.

Called only after the job's row has committed. If the broker is unreachable the job stays
queued in the database and the recovery loop sends the message again later.
"""

from __future__ import annotations

import logging
import uuid

from app.config import Settings
from workers.celery_app import RUN_JOB_TASK, get_celery_app

logger = logging.getLogger(__name__)


def enqueue_job(settings: Settings, job_id: uuid.UUID) -> bool:
    try:
        get_celery_app(settings).send_task(RUN_JOB_TASK, args=[str(job_id)], queue=settings.queue)
    except Exception:
        logger.warning(
            "could not enqueue job %s; the recovery loop will resend it", job_id, exc_info=True
        )
        return False
    return True
