"""The Celery application: configuration only (tasks live in workers.tasks).

Delivery guarantees come from the database, not the broker: a message is a doorbell that says
"job X may have work". Settings follow ../shared/RELIABILITY.md: late acks, requeue when a worker
process dies, one message prefetched at a time, JSON only, a time limit below the broker's
visibility timeout so a long job is not redelivered while it still runs.

The job's own time limit is a deadline the worker checks (app/jobs/execution.py); Celery's soft
and hard limits sit a little above it, as a backstop for code that does not report progress.
"""

from __future__ import annotations

import threading

from celery import Celery

from app.config import JOB_HARD_GRACE_SECONDS, JOB_SOFT_GRACE_SECONDS, Settings

RUN_JOB_TASK = "rhosynth.run_job"
RUN_SAMPLE_TASK = "rhosynth.run_sample"
BUILD_OWNER_TIER_TASK = "rhosynth.build_owner_tier"
DELIVER_WEBHOOKS_TASK = "rhosynth.deliver_webhooks"

_lock = threading.Lock()
_apps: dict[tuple[str, str, bool], Celery] = {}


def create_celery_app(settings: Settings, *, publisher: bool = False) -> Celery:
    """The Celery app. ``publisher=True``: the variant that only sends messages (the API and the
    recovery loop), whose broker sockets time out after ``RHOSYNTH_BROKER_PUBLISH_TIMEOUT_SECONDS``
    so that a broker that accepts connections and never answers cannot hang a sender. The
    consuming worker keeps blocking reads (a socket timeout would break its long polls)."""
    app = Celery("rhosynth", broker=settings.celery_broker_url, include=["workers.tasks"])
    hard_limit = settings.job_time_limit_seconds + JOB_HARD_GRACE_SECONDS
    app.conf.update(
        task_serializer="json",
        accept_content=["json"],
        result_serializer="json",
        task_ignore_result=True,
        result_backend=None,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_time_limit=hard_limit,
        task_soft_time_limit=settings.job_time_limit_seconds + JOB_SOFT_GRACE_SECONDS,
        broker_transport_options=_transport_options(
            settings.celery_broker_url,
            hard_limit,
            settings.broker_publish_timeout_seconds if publisher else None,
        ),
        task_default_queue=settings.queue,
        broker_connection_retry_on_startup=True,
        broker_connection_timeout=(settings.broker_publish_timeout_seconds if publisher else 5),
        task_publish_retry=True,
        # A publisher gives up quickly: the job is in the database and the recovery loop sends
        # its message again later.
        task_publish_retry_policy={
            "max_retries": 1 if publisher else 3,
            "interval_start": 0.2,
            "interval_step": 0.5,
            "interval_max": 1.0,
        },
        worker_hijack_root_logger=False,
        worker_send_task_events=False,
        task_send_sent_event=False,
        worker_enable_remote_control=False,
        worker_cancel_long_running_tasks_on_connection_loss=False,
    )
    return app


def _transport_options(
    broker_url: str, hard_limit: int, socket_timeout: float | None
) -> dict[str, object]:
    if broker_url.startswith(("redis://", "rediss://")):
        # Must exceed the task time limit: otherwise Redis redelivers a job that is still running.
        options: dict[str, object] = {"visibility_timeout": hard_limit + 600}
        if socket_timeout is not None:
            options.update(socket_timeout=socket_timeout, socket_connect_timeout=socket_timeout)
        return options
    # kombu's SQLAlchemy transport passes its options to create_engine(); SQLite needs patience
    # because the API and the worker share the file (a publisher waits less).
    if broker_url.startswith("sqla+sqlite"):
        return {"connect_args": {"timeout": socket_timeout or 30}}
    return {}


def get_celery_app(settings: Settings, *, publisher: bool = False) -> Celery:
    """The process's Celery app for these settings: the worker's own, or (``publisher=True``) the
    one that sends job messages from the API and the recovery loop."""
    key = (settings.celery_broker_url, settings.queue, publisher)
    with _lock:
        app = _apps.get(key)
        if app is None:
            app = create_celery_app(settings, publisher=publisher)
            _apps[key] = app
        return app
