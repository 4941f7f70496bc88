"""Ringing the doorbell: tell the workers a job is waiting.

Called only after the job's row has committed. The database is the truth about a job; the broker
is a doorbell. So a request never waits for the broker: :func:`ring` hands the job id to one
background thread per process, which sends the message with a timeout
(``RHOSYNTH_BROKER_PUBLISH_TIMEOUT_SECONDS``). If the broker is unreachable, refuses, or accepts
connections and never answers, the send fails after that timeout, the sender pauses, and the job
stays queued in the database: the recovery loop sends its message again later
(``RHOSYNTH_REQUEUE_AFTER_SECONDS``).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable

from app.config import Settings
from workers.celery_app import RUN_JOB_TASK, get_celery_app

logger = logging.getLogger(__name__)

DOORBELL_CAPACITY = 100_000


def enqueue_job(
    settings: Settings, job_id: uuid.UUID, task: str = RUN_JOB_TASK, queue: str | None = None
) -> bool:
    """Send the job's message now, in this thread (the recovery loop; tests). False on failure.

    ``task`` is the Celery task (a job, a derived sample: ``RUN_SAMPLE_TASK``, or an owner tier:
    ``BUILD_OWNER_TIER_TASK``), sent to ``queue`` (default: the jobs' queue)."""
    try:
        get_celery_app(settings, publisher=True).send_task(
            task, args=[str(job_id)], queue=queue or settings.queue
        )
    except Exception as error:
        logger.warning(
            "could not enqueue %s %s (%s: %s); the recovery loop will resend it",
            task,
            job_id,
            type(error).__name__,
            error,
        )
        return False
    return True


class Doorbell:
    """One background thread that sends job messages in order, so requests never wait on them.

    After a failed send it drops what is waiting for ``pause_seconds`` instead of queueing behind
    a dead broker (those jobs are queued in the database; the recovery loop resends them).
    ``send(job_id) -> bool`` must bound its own time (the publisher's socket timeouts do).
    """

    def __init__(
        self,
        send: Callable[[uuid.UUID], bool],
        *,
        capacity: int = DOORBELL_CAPACITY,
        pause_seconds: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._send = send
        self._queue: queue.Queue[uuid.UUID] = queue.Queue(maxsize=capacity)
        self._pause_seconds = pause_seconds
        self._clock = clock
        self._paused_until = 0.0
        self.dropped = 0
        self._thread = threading.Thread(target=self._run, name="rhosynth-doorbell", daemon=True)
        self._thread.start()

    def ring(self, job_id: uuid.UUID) -> bool:
        """Queue the job's message; never blocks. False if it was dropped (queue full)."""
        try:
            self._queue.put_nowait(job_id)
        except queue.Full:
            self.dropped += 1
            logger.warning("doorbell queue full; job %s will be sent by the recovery loop", job_id)
            return False
        return True

    def join(self) -> None:
        """Wait until every queued message has been sent or dropped (tests)."""
        self._queue.join()

    def _run(self) -> None:
        while True:
            job_id = self._queue.get()
            try:
                if self._clock() < self._paused_until:
                    self.dropped += 1
                    continue
                if not self._send(job_id):
                    self._paused_until = self._clock() + self._pause_seconds
            except Exception:  # the thread must survive anything
                logger.exception("doorbell: sending job %s failed", job_id)
            finally:
                self._queue.task_done()


_lock = threading.Lock()
_doorbells: dict[tuple[str, str, str], Doorbell] = {}


def ring(
    settings: Settings, job_id: uuid.UUID, task: str = RUN_JOB_TASK, queue: str | None = None
) -> None:
    """Tell the workers about a committed job (or sample, with its ``task``; or a webhook event
    with ``queue``) without waiting for the broker (the API's path)."""
    key = (settings.celery_broker_url, queue or settings.queue, task)
    with _lock:
        doorbell = _doorbells.get(key)
        if doorbell is None:
            doorbell = Doorbell(
                lambda job: enqueue_job(settings, job, task, queue),
                pause_seconds=settings.broker_publish_timeout_seconds,
            )
            _doorbells[key] = doorbell
    doorbell.ring(job_id)
