"""Issue 11, dependencies that hang: a broker that accepts connections and never answers.

Today's failure: job submissions hung for 15 minutes because the request sent the Celery message
itself, on a socket with no timeout. Now the request only rings a doorbell (a background thread
sends the message with a timeout); the job is committed as queued before that, and the recovery
loop resends messages that were never sent.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.jobs.dispatch import Doorbell, enqueue_job
from tests.support.api import create_dataset, submit
from tests.support.stack import Stack


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_ring_never_waits_for_the_broker() -> None:
    release = threading.Event()
    sent: list[uuid.UUID] = []

    def send(job_id: uuid.UUID) -> bool:
        release.wait(30)  # a broker that does not answer
        sent.append(job_id)
        return True

    doorbell = Doorbell(send)
    ids = [uuid.uuid4() for _ in range(5)]
    ringer = threading.Thread(target=lambda: [doorbell.ring(i) for i in ids])
    ringer.start()
    ringer.join(timeout=5)
    assert not ringer.is_alive(), "ring() blocked on the broker"
    release.set()
    doorbell.join()
    assert sent == ids  # sent once the broker answers, in order


def test_after_a_failed_send_the_doorbell_pauses_and_drops() -> None:
    clock = FakeClock()
    attempts: list[uuid.UUID] = []
    broker_up = False

    def send(job_id: uuid.UUID) -> bool:
        attempts.append(job_id)
        return broker_up

    doorbell = Doorbell(send, pause_seconds=5.0, clock=clock)
    first, during, after = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    doorbell.ring(first)
    doorbell.join()
    doorbell.ring(during)  # within the pause: dropped, left to the recovery loop
    doorbell.join()
    clock.now = 6.0
    broker_up = True
    doorbell.ring(after)
    doorbell.join()
    assert attempts == [first, after]
    assert doorbell.dropped == 1


def test_a_full_doorbell_drops_instead_of_blocking() -> None:
    release = threading.Event()
    doorbell = Doorbell(lambda _job: release.wait(30), capacity=2)
    results = [doorbell.ring(uuid.uuid4()) for _ in range(5)]
    # One message is being sent, two wait in the queue, the rest are dropped.
    assert results.count(False) >= 2 and doorbell.dropped == results.count(False)
    release.set()
    doorbell.join()


@contextlib.contextmanager
def silent_broker() -> Iterator[int]:
    """A TCP server that accepts every connection and never sends a byte."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            with contextlib.suppress(OSError):
                accepted.append(server.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield int(server.getsockname()[1])
    finally:
        stop.set()
        thread.join()
        for connection in accepted:
            connection.close()
        server.close()


@pytest.fixture(scope="module")
def hanging_broker_stack(
    _services: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    with silent_broker() as port:
        stack = Stack.create(
            "hang",
            Path(tmp_path_factory.mktemp("hang-stack")),
            broker_url=f"redis://127.0.0.1:{port}/0",
            broker_publish_timeout_seconds=1.0,
        )
        try:
            yield stack
        finally:
            stack.destroy()


def test_submissions_answer_while_the_broker_hangs(
    hanging_broker_stack: Stack, people_csv: bytes, people_schema: str
) -> None:
    stack = hanging_broker_stack
    tenant = f"hang-{uuid.uuid4().hex[:8]}"
    with (
        stack.client(stack.create_key(tenant, "owner")) as owner,
        stack.client(stack.create_key(tenant, "analyst")) as analyst,
    ):
        dataset = create_dataset(owner, people_csv, people_schema, budget_rho="1")
        barrier = threading.Barrier(10)
        statuses: list[int] = []

        def one() -> None:
            with httpx.Client(
                base_url=stack.base_url, headers=analyst.headers, timeout=30
            ) as client:
                barrier.wait()
                statuses.append(submit(client, dataset["id"], rho="0.05").status_code)

        started = time.monotonic()
        threads = [threading.Thread(target=one) for _ in range(10)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.monotonic() - started
        assert statuses == [202] * 10
        # Generous against a 2-core CI machine; the bug was a 15-minute hang.
        assert elapsed < 10, elapsed
        jobs = analyst.get(f"/v1/datasets/{dataset['id']}/jobs").json()["items"]
        assert {job["status"] for job in jobs} == {"queued"}
        assert analyst.get("/healthz").status_code == 200


def test_enqueue_gives_up_after_the_publish_timeout(hanging_broker_stack: Stack) -> None:
    """The recovery loop's synchronous send is bounded too (and reports failure)."""
    started = time.monotonic()
    assert enqueue_job(hanging_broker_stack.settings, uuid.uuid4()) is False
    assert time.monotonic() - started < 15
