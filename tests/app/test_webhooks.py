"""Issue 27 §4: webhooks. Subscriptions managed by admin keys; events written to an outbox in the
transaction of the state change; a delivery pass that signs, retries with backoff and keeps the
order of each job's events.

A real HTTP receiver (``http.server`` in a thread on 127.0.0.1, a random port) takes the
deliveries. The delivery pass (``deliver_due``) is driven directly, and the clock it reads is
moved instead of sleeping through the backoff. On PostgreSQL and on SQLite, each on a database
of its own built by the migrations.
"""

from __future__ import annotations

import json
import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, inspect, select

from app.auth.service import Principal, authenticate, create_key
from app.config import Settings
from app.db.session import dispose_engines, get_session_factory, transaction
from app.jobs import execution
from app.jobs import service as job_service
from app.jobs.execution import GENERIC_FAILURE
from app.jobs.schemas import JobOut
from app.main import create_app
from app.samples import execution as sample_execution
from app.samples.models import Sample
from app.webhooks import delivery, outbox
from app.webhooks import repository as webhook_repository
from app.webhooks.models import WebhookDelivery, WebhookEvent
from rhosynth.client import WebhookVerificationError, verify_webhook
from tests.support import services
from tests.support.clock import Clock
from tests.support.ledger import add_tableless_dataset

pytestmark = pytest.mark.usefixtures("_services")


@pytest.fixture(params=["postgresql", "sqlite"])
def settings(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Settings]:
    with services.migrated_settings(request.param, tmp_path, "webhooks") as settings:
        yield settings


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings), raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(delivery, "utcnow", clock)
    monkeypatch.setattr(outbox, "utcnow", clock)
    return clock


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes

    @property
    def event(self) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.body)
        return parsed


@dataclass
class Receiver:
    """A webhook receiver: records every request; answers ``status`` (or what ``decide``
    returns for a request), after ``gate`` is set."""

    port: int
    status: int = 200
    decide: Callable[[Received], int] | None = None
    gate: threading.Event = field(default_factory=threading.Event)
    received: list[Received] = field(default_factory=list)
    arrived: threading.Event = field(default_factory=threading.Event)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def start(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers["Content-Length"])
                got = Received(dict(self.headers.items()), self.rfile.read(length))
                receiver.arrived.set()
                receiver.gate.wait(30)
                code = receiver.decide(got) if receiver.decide else receiver.status
                if 200 <= code < 300:
                    receiver.received.append(got)
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self.server is not None:
            self.gate.set()
            self.server.shutdown()
            self.server.server_close()
            self.server = None


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    receiver = Receiver(port=0)
    receiver.gate.set()
    receiver.start()
    yield receiver
    receiver.stop()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@dataclass
class Tenant:
    name: str
    admin: str
    owner: str
    analyst: str
    owner_principal: Principal


def _key(settings: Settings, tenant: str, role: str) -> str:
    with transaction(get_session_factory(settings.sqlalchemy_url)) as session:
        return create_key(session, settings.secret_key_bytes(), tenant, role, role).key


def _tenant(settings: Settings) -> Tenant:
    name = f"tenant-{uuid.uuid4().hex[:8]}"
    admin = _key(settings, name, "admin")
    owner = _key(settings, name, "owner")
    analyst = _key(settings, name, "analyst")
    with transaction(get_session_factory(settings.sqlalchemy_url)) as session:
        principal = authenticate(session, settings.secret_key_bytes(), owner)
    assert principal is not None
    return Tenant(name, admin, owner, analyst, principal)


@pytest.fixture
def tenant(settings: Settings) -> Tenant:
    return _tenant(settings)


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _dataset(settings: Settings, tenant: Tenant, total_rho: str = "1") -> str:
    with transaction(get_session_factory(settings.sqlalchemy_url)) as session:
        return str(add_tableless_dataset(session, tenant.owner_principal, Decimal(total_rho)))


def _subscribe(
    client: TestClient, tenant: Tenant, url: str, events: list[str], **extra: Any
) -> dict[str, Any]:
    response = client.post(
        "/v1/webhooks", json={"url": url, "events": events, **extra}, headers=bearer(tenant.admin)
    )
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def _submit(client: TestClient, tenant: Tenant, dataset: str, rho: str = "0.1") -> str:
    response = client.post(
        f"/v1/datasets/{dataset}/jobs",
        json={"method": "independent", "budget": {"rho": rho}},
        headers=bearer(tenant.analyst),
    )
    assert response.status_code == 202, response.text
    job_id: str = response.json()["id"]
    return job_id


def _cancel(client: TestClient, tenant: Tenant, job_id: str) -> None:
    response = client.post(f"/v1/jobs/{job_id}/cancel", headers=bearer(tenant.analyst))
    assert response.status_code == 202, response.text
    assert response.json()["status"] == "cancelled"


def _deliveries(client: TestClient, tenant: Tenant, webhook: str) -> list[dict[str, Any]]:
    response = client.get(f"/v1/webhooks/{webhook}/deliveries", headers=bearer(tenant.admin))
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return items


def _outbox_counts(settings: Settings) -> tuple[int, int]:
    with transaction(get_session_factory(settings.sqlalchemy_url)) as session:
        events = session.scalar(select(func.count()).select_from(WebhookEvent))
        deliveries = session.scalar(select(func.count()).select_from(WebhookDelivery))
    return int(events or 0), int(deliveries or 0)


def _run_job(settings: Settings, job_id: str, outcome: Callable[..., object]) -> str:
    """One attempt of the job in this process, the engine replaced by ``outcome``."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(execution, "_synthesize", outcome)
        return execution.execute_job(settings, uuid.UUID(job_id)).status


def _rows(*args: object) -> tuple[int, object]:
    return 7, args[5]  # the rows and the key published (_synthesize's output_key)


def test_events_arrive_signed_and_verify_with_the_client_helper(
    client: TestClient, settings: Settings, tenant: Tenant, receiver: Receiver
) -> None:
    created = _subscribe(
        client, tenant, receiver.url, ["job.succeeded", "job.cancelled"], description="ci"
    )
    secret = created["secret"]
    assert secret.startswith("whsec_")
    # The secret is shown once: neither the list nor the one-item read carries it.
    listed = client.get("/v1/webhooks", headers=bearer(tenant.admin))
    one = client.get(f"/v1/webhooks/{created['id']}", headers=bearer(tenant.admin))
    assert listed.status_code == one.status_code == 200
    assert secret not in listed.text and secret not in one.text
    assert one.json() == {k: v for k, v in created.items() if k != "secret"}

    dataset = _dataset(settings, tenant)
    cancelled = _submit(client, tenant, dataset)
    _cancel(client, tenant, cancelled)
    succeeded = _submit(client, tenant, dataset)
    assert _run_job(settings, succeeded, _rows) == "succeeded"

    report = delivery.deliver_due(settings)
    assert report.delivered == 2
    assert [r.event["type"] for r in receiver.received] == ["job.cancelled", "job.succeeded"]
    for got in receiver.received:
        event = verify_webhook(secret, got.body, got.headers["Rhosynth-Signature"])
        assert event["id"] == got.headers["Rhosynth-Event-Id"]
        assert got.headers["Rhosynth-Delivery-Id"]
        # A changed body, another secret and a stale timestamp are all refused.
        with pytest.raises(WebhookVerificationError):
            verify_webhook(secret, got.body + b" ", got.headers["Rhosynth-Signature"])
        with pytest.raises(WebhookVerificationError):
            verify_webhook("whsec_other", got.body, got.headers["Rhosynth-Signature"])
        stamp = int(got.headers["Rhosynth-Signature"].split(",")[0].removeprefix("t="))
        with pytest.raises(WebhookVerificationError):
            verify_webhook(secret, got.body, got.headers["Rhosynth-Signature"], now=stamp + 301)
    done = receiver.received[1].event["data"]
    assert done["job"]["id"] == succeeded and done["job"]["status"] == "succeeded"
    assert done["links"]["output"] == f"/v1/jobs/{succeeded}/output"

    log = _deliveries(client, tenant, created["id"])
    assert [d["status"] for d in log] == ["delivered", "delivered"]
    assert all(d["attempts"] == 1 and d["last_status_code"] == 200 for d in log)
    assert all(d["next_attempt_at"] is None for d in log)
    # Nothing is sent twice once delivered.
    assert delivery.deliver_due(settings).delivered == 0
    assert len(receiver.received) == 2


def test_a_rotated_secret_overlaps_the_old_one_for_a_day(
    client: TestClient, settings: Settings, tenant: Tenant, receiver: Receiver, clock: Clock
) -> None:
    created = _subscribe(client, tenant, receiver.url, ["job.cancelled"])
    old = created["secret"]
    rotated = client.post(
        f"/v1/webhooks/{created['id']}/rotate-secret", headers=bearer(tenant.admin)
    )
    assert rotated.status_code == 200, rotated.text
    new = rotated.json()["secret"]
    assert new != old and new.startswith("whsec_")
    one = client.get(f"/v1/webhooks/{created['id']}", headers=bearer(tenant.admin))
    assert new not in one.text and old not in one.text
    dataset = _dataset(settings, tenant)

    def delivered_now() -> Received:
        _cancel(client, tenant, _submit(client, tenant, dataset))
        assert delivery.deliver_due(settings).delivered == 1
        return receiver.received[-1]

    during = delivered_now()
    for secret in (new, old):
        verify_webhook(secret, during.body, during.headers["Rhosynth-Signature"], now=_ts(clock))
    clock.advance(24 * 3600 + 1)
    after = delivered_now()
    verify_webhook(new, after.body, after.headers["Rhosynth-Signature"], now=_ts(clock))
    with pytest.raises(WebhookVerificationError):
        verify_webhook(old, after.body, after.headers["Rhosynth-Signature"], now=_ts(clock))


def test_a_receiver_that_is_down_gets_every_event_once_it_is_back(
    client: TestClient, settings: Settings, tenant: Tenant, clock: Clock
) -> None:
    port = _closed_port()
    down = Receiver(port=port)
    created = _subscribe(client, tenant, down.url, ["job.cancelled"])
    dataset = _dataset(settings, tenant)
    jobs = [_submit(client, tenant, dataset) for _ in range(3)]
    for job in jobs:
        _cancel(client, tenant, job)

    # Port closed: every try fails and backs off (10 s, then 30 s).
    assert delivery.deliver_due(settings).retrying == 3
    assert delivery.deliver_due(settings).retrying == 0  # not due again yet
    clock.advance(10)
    assert delivery.deliver_due(settings).retrying == 3
    log = _deliveries(client, tenant, created["id"])
    assert {d["status"] for d in log} == {"pending"}
    assert {d["attempts"] for d in log} == {2}
    assert all(d["last_error"] and d["last_status_code"] is None for d in log)

    # Back, but answering 500 for a while.
    back = Receiver(port=port, status=500)
    back.gate.set()
    back.start()
    try:
        clock.advance(30)
        assert delivery.deliver_due(settings).retrying == 3
        assert {d["last_status_code"] for d in _deliveries(client, tenant, created["id"])} == {500}
        back.status = 200
        clock.advance(120)
        assert delivery.deliver_due(settings).delivered == 3
    finally:
        back.stop()
    events = [
        verify_webhook(created["secret"], r.body, r.headers["Rhosynth-Signature"], now=_ts(clock))
        for r in back.received
    ]
    assert sorted(e["data"]["job"]["id"] for e in events) == sorted(jobs)
    log = _deliveries(client, tenant, created["id"])
    assert {d["status"] for d in log} == {"delivered"} and {d["attempts"] for d in log} == {4}


def _ts(clock: Clock) -> float:
    return clock.now.timestamp()


def test_events_of_one_job_arrive_in_order_and_a_given_up_one_unblocks_the_next(
    client: TestClient, settings: Settings, tenant: Tenant, receiver: Receiver, clock: Clock
) -> None:
    created = _subscribe(client, tenant, receiver.url, ["job.succeeded", "sample.ready"])
    subscription = uuid.UUID(created["id"])
    first_job, other_job, doomed_job = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    tenant_id = tenant.owner_principal.tenant_id

    def event(job: uuid.UUID, n: int) -> str:
        with transaction(get_session_factory(settings.sqlalchemy_url)) as session:
            written = webhook_repository.add_event(
                session,
                public_id=uuid.uuid4(),
                tenant_id=tenant_id,
                event_type="sample.ready",
                ordering_key=job,
                payload={"type": "sample.ready", "data": {"job": str(job), "n": n}},
                subscription_ids=[subscription],
                now=clock.now,
            )
            return str(written.public_id)

    first = [event(first_job, n) for n in range(3)]
    other = event(other_job, 0)
    doomed = [event(doomed_job, n) for n in range(2)]
    refused = {first[0], doomed[0]}
    receiver.decide = lambda got: 500 if got.headers["Rhosynth-Event-Id"] in refused else 200

    def arrived() -> list[str]:
        return [r.headers["Rhosynth-Event-Id"] for r in receiver.received]

    delivery.deliver_due(settings)
    # The heads of both blocked jobs failed; the other job's event went; nothing overtook.
    assert arrived() == [other]
    # What waits behind a backing-off head is not due: the sweep does not ring for it.
    sweep_rang: list[str] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            delivery.dispatch,
            "enqueue_job",
            lambda _settings, _id, task, queue: sweep_rang.append(queue) or True,
        )
        assert delivery.ring_if_due(settings) is False
        clock.advance(10)
        assert delivery.ring_if_due(settings) is True
    assert sweep_rang == [settings.webhook_queue]
    clock.advance(10)
    delivery.deliver_due(settings)
    assert arrived() == [other]

    refused.discard(first[0])
    clock.advance(30)
    delivery.deliver_due(settings)
    assert arrived() == [other, *first]

    # The doomed job's head is given up after the last backoff (about 24 h); then its next goes.
    for wait in delivery.BACKOFF_SECONDS[2:-1]:
        clock.advance(wait)
        delivery.deliver_due(settings)
        assert doomed[1] not in arrived()
    clock.advance(delivery.BACKOFF_SECONDS[-1])
    delivery.deliver_due(settings)  # the last try fails: given up, and the next one goes
    assert arrived()[-1] == doomed[1]
    log = {d["event_id"]: d for d in _deliveries(client, tenant, created["id"])}
    assert log[doomed[0]]["status"] == "failed"
    assert log[doomed[0]]["attempts"] == len(delivery.BACKOFF_SECONDS) + 1
    assert log[doomed[1]]["status"] == "delivered"

    # Replay: the given-up delivery is sent again, now that the receiver takes it.
    refused.clear()
    replayed = client.post(
        f"/v1/webhooks/deliveries/{log[doomed[0]]['id']}/replay", headers=bearer(tenant.admin)
    )
    assert replayed.status_code == 202, replayed.text
    assert replayed.json()["status"] == "pending"
    delivery.deliver_due(settings)
    assert arrived()[-1] == doomed[0]
    again = {d["event_id"]: d for d in _deliveries(client, tenant, created["id"])}
    assert again[doomed[0]]["status"] == "delivered"


def test_a_jobs_sample_ready_waits_for_its_job_succeeded(
    client: TestClient, settings: Settings, tenant: Tenant, receiver: Receiver, clock: Clock
) -> None:
    created = _subscribe(client, tenant, receiver.url, ["job.succeeded", "sample.ready"])
    dataset = _dataset(settings, tenant)
    job = _submit(client, tenant, dataset)
    assert _run_job(settings, job, _rows) == "succeeded"
    # A derived sample of the job, drawn by the sample worker's code (its model read stubbed).
    sample_id = uuid.uuid4()
    with transaction(get_session_factory(settings.sqlalchemy_url)) as session:
        session.add(
            Sample(
                id=sample_id,
                tenant_id=tenant.owner_principal.tenant_id,
                dataset_id=uuid.UUID(dataset),
                job_id=uuid.UUID(job),
                rows=5,
                seed=1,
                status="queued",
                requested_by=tenant.owner_principal.key_id,
                enqueued_at=clock.now,
            )
        )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sample_execution, "_draw", lambda *_args: 5)
        patch.setattr(sample_execution.TableSchema, "from_json", lambda _json: object())
        assert sample_execution.execute_sample(settings, sample_id) == "succeeded"

    receiver.decide = lambda got: 500 if got.event["type"] == "job.succeeded" else 200
    delivery.deliver_due(settings)
    assert receiver.received == []  # sample.ready waits behind the refused job.succeeded
    receiver.decide = None
    clock.advance(10)
    delivery.deliver_due(settings)
    assert [r.event["type"] for r in receiver.received] == ["job.succeeded", "sample.ready"]
    ready = receiver.received[1].event["data"]
    assert ready["sample"]["id"] == str(sample_id) and ready["sample"]["job_id"] == job
    assert ready["links"]["output"] == f"/v1/samples/{sample_id}/output"
    log = _deliveries(client, tenant, created["id"])
    assert [(d["event_type"], d["attempts"]) for d in log] == [
        ("sample.ready", 1),
        ("job.succeeded", 2),
    ]


def test_a_slow_receiver_does_not_slow_the_api(
    client: TestClient, settings: Settings, tenant: Tenant
) -> None:
    slow = Receiver(port=0)  # answers only once the test opens its gate
    slow.start()
    try:
        created = _subscribe(client, tenant, slow.url, ["job.cancelled"])
        dataset = _dataset(settings, tenant)
        job = _submit(client, tenant, dataset)
        # The request that causes the event returns while the receiver would block for ever:
        # the API only wrote the outbox.
        _cancel(client, tenant, job)
        assert not slow.arrived.is_set()
        log = _deliveries(client, tenant, created["id"])
        assert [(d["status"], d["attempts"]) for d in log] == [("pending", 0)]

        # The delivery pass sends it (and waits for the receiver, not the API).
        passes: list[delivery.DeliveryReport] = []
        sender = threading.Thread(target=lambda: passes.append(delivery.deliver_due(settings)))
        sender.start()
        assert slow.arrived.wait(30)
        assert client.get("/v1/webhooks", headers=bearer(tenant.admin)).status_code == 200
        slow.gate.set()
        sender.join(30)
        assert passes[0].delivered == 1
        assert slow.received[0].event["data"]["job"]["id"] == job
    finally:
        slow.stop()


def test_the_outbox_row_exists_if_and_only_if_the_state_change_committed(
    client: TestClient, settings: Settings, tenant: Tenant, receiver: Receiver
) -> None:
    _subscribe(client, tenant, receiver.url, ["job.cancelled", "job.failed"])
    _subscribe(client, tenant, receiver.url, ["job.cancelled"])
    _subscribe(client, tenant, receiver.url, ["job.succeeded"])  # not this event
    dataset = _dataset(settings, tenant)
    job = _submit(client, tenant, dataset)
    factory = get_session_factory(settings.sqlalchemy_url)
    principal = tenant.owner_principal

    # Rolled back after the cancel: neither the cancel nor its event.
    seen_inside: list[tuple[int, int]] = []

    def cancel_then_fail() -> None:
        with transaction(factory) as session:
            job_service.cancel_job(session, principal, uuid.UUID(job))
            seen_inside.append(_count_in(session))
            raise RuntimeError("the request failed after the cancel")

    with pytest.raises(RuntimeError):
        cancel_then_fail()
    assert seen_inside == [(1, 2)]  # written in the same transaction...
    assert _outbox_counts(settings) == (0, 0)  # ...and gone with it
    assert client.get(f"/v1/jobs/{job}", headers=bearer(tenant.owner)).json()["status"] == (
        "queued"
    )

    # Committed: one event, one delivery per subscription that wants it.
    _cancel(client, tenant, job)
    assert _outbox_counts(settings) == (1, 2)
    # A transition that changes nothing (already finished) writes nothing.
    again = client.post(f"/v1/jobs/{job}/cancel", headers=bearer(tenant.analyst))
    assert again.status_code == 409
    assert _outbox_counts(settings) == (1, 2)

    # A worker's failure: its event commits with the failed state.
    failing = _submit(client, tenant, dataset)

    def boom(*_args: object) -> int:
        raise RuntimeError("value 'Alice' in row 12345")

    assert _run_job(settings, failing, boom) == "failed"
    assert _outbox_counts(settings) == (2, 3)


def _count_in(session: Any) -> tuple[int, int]:
    events = session.scalar(select(func.count()).select_from(WebhookEvent))
    deliveries = session.scalar(select(func.count()).select_from(WebhookDelivery))
    return int(events), int(deliveries)


def test_payloads_carry_only_what_an_analyst_may_see(
    client: TestClient, settings: Settings, tenant: Tenant, receiver: Receiver
) -> None:
    _subscribe(client, tenant, receiver.url, ["job.failed", "job.succeeded"])
    dataset = _dataset(settings, tenant)
    failing = _submit(client, tenant, dataset)

    def boom(*_args: object) -> int:
        raise RuntimeError("value 'Alice' in row 12345")

    assert _run_job(settings, failing, boom) == "failed"
    succeeding = _submit(client, tenant, dataset)
    assert _run_job(settings, succeeding, _rows) == "succeeded"
    delivery.deliver_due(settings)
    assert len(receiver.received) == 2
    for got in receiver.received:
        text = got.body.decode()
        assert "Alice" not in text and "12345" not in text
        for forbidden in ("output_key", "n_rows", "storage_key", "detail_fraction", "secret"):
            assert forbidden not in text
        job = got.event["data"]["job"]
        assert set(job) == set(JobOut.model_fields)
        assert job["progress_detail"] is None  # the owner-only progress
        # The same view an analyst's GET answers (timestamps coarsened alike).
        seen = client.get(f"/v1/jobs/{job['id']}", headers=bearer(tenant.analyst)).json()
        assert job == seen
    failed = receiver.received[0].event["data"]["job"]
    assert failed["status"] == "failed" and failed["error"] == GENERIC_FAILURE


def test_budget_below_threshold_fires_once_when_it_is_crossed(
    client: TestClient, settings: Settings, tenant: Tenant, receiver: Receiver
) -> None:
    missing = client.post(
        "/v1/webhooks",
        json={"url": receiver.url, "events": ["budget.below_threshold"]},
        headers=bearer(tenant.admin),
    )
    assert missing.status_code == 422
    _subscribe(
        client, tenant, receiver.url, ["budget.below_threshold"], budget_threshold_rho="0.75"
    )
    dataset = _dataset(settings, tenant, total_rho="1")
    _submit(client, tenant, dataset, rho="0.1")  # 0.9 left
    _submit(client, tenant, dataset, rho="0.2")  # 0.7 left: crossed
    _submit(client, tenant, dataset, rho="0.1")  # 0.6 left
    delivery.deliver_due(settings)
    assert [r.event["type"] for r in receiver.received] == ["budget.below_threshold"]
    data = receiver.received[0].event["data"]
    assert data == {
        "dataset_id": dataset,
        "remaining_rho": "0.7",
        "threshold_rho": "0.75",
        "links": {"dataset": f"/v1/datasets/{dataset}"},
    }


def test_webhook_routes_are_for_admin_keys_of_the_tenant_only(
    client: TestClient, settings: Settings, tenant: Tenant, receiver: Receiver
) -> None:
    created = _subscribe(client, tenant, receiver.url, ["job.cancelled", "approval.requested"])
    assert created["events"] == ["approval.requested", "job.cancelled"]  # reserved names accepted
    dataset = _dataset(settings, tenant)
    _cancel(client, tenant, _submit(client, tenant, dataset))
    delivery_id = _deliveries(client, tenant, created["id"])[0]["id"]
    calls: list[tuple[str, str, dict[str, Any] | None]] = [
        ("POST", "/v1/webhooks", {"url": receiver.url, "events": ["job.failed"]}),
        ("GET", "/v1/webhooks", None),
        ("GET", f"/v1/webhooks/{created['id']}", None),
        ("GET", f"/v1/webhooks/{created['id']}/deliveries", None),
        ("POST", f"/v1/webhooks/deliveries/{delivery_id}/replay", None),
        ("POST", f"/v1/webhooks/{created['id']}/rotate-secret", None),
        ("DELETE", f"/v1/webhooks/{created['id']}", None),
    ]
    for key in (tenant.owner, tenant.analyst):
        for method, path, body in calls:
            response = client.request(method, path, json=body, headers=bearer(key))
            assert response.status_code == 403, (method, path, response.text)
    # Another tenant's admin sees none of it.
    other = _tenant(settings)
    assert client.get("/v1/webhooks", headers=bearer(other.admin)).json() == {"items": []}
    for method, path, body in calls[2:]:
        response = client.request(method, path, json=body, headers=bearer(other.admin))
        assert response.status_code == 404, (method, path, response.text)

    # Only http(s) URLs; an operator's allow-list is applied.
    for url in ("ftp://127.0.0.1/x", "file:///etc/passwd", "http://user:pw@127.0.0.1/x"):
        refused = client.post(
            "/v1/webhooks", json={"url": url, "events": ["job.failed"]}, headers=bearer(other.admin)
        )
        assert refused.status_code == 422, url
    limited = settings.model_copy(update={"webhook_allowed_hosts": ["127.0.0.1"]})
    with TestClient(create_app(limited)) as limited_client:
        far = limited_client.post(
            "/v1/webhooks",
            json={"url": "https://hooks.example.org/x", "events": ["job.failed"]},
            headers=bearer(other.admin),
        )
        assert far.status_code == 422 and "RHOSYNTH_WEBHOOK_ALLOWED_HOSTS" in far.text
        near = limited_client.post(
            "/v1/webhooks",
            json={"url": receiver.url, "events": ["job.failed"]},
            headers=bearer(other.admin),
        )
        assert near.status_code == 201

    # Deleting discards what is still owed: nothing is sent afterwards.
    deleted = client.delete(f"/v1/webhooks/{created['id']}", headers=bearer(tenant.admin))
    assert deleted.status_code == 204
    assert client.get("/v1/webhooks", headers=bearer(tenant.admin)).json() == {"items": []}
    assert delivery.deliver_due(settings).delivered == 0
    assert receiver.received == []


def test_the_migration_downgrades_and_upgrades(
    client: TestClient, settings: Settings, tenant: Tenant, receiver: Receiver
) -> None:
    from alembic import command
    from alembic.config import Config

    import migrations

    created = _subscribe(client, tenant, receiver.url, ["job.cancelled"])
    _cancel(client, tenant, _submit(client, tenant, _dataset(settings, tenant)))
    assert _outbox_counts(settings) == (1, 1)
    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).parent))
    config.attributes["database_url"] = settings.sqlalchemy_url
    command.downgrade(config, "0012_audit")
    dispose_engines()
    with transaction(get_session_factory(settings.sqlalchemy_url)) as session:
        names = set(inspect(session.get_bind()).get_table_names())
    assert not names & {"webhook_subscriptions", "webhook_events", "webhook_deliveries"}
    command.upgrade(config, "head")
    dispose_engines()
    assert _outbox_counts(settings) == (0, 0)
    assert client.get(
        f"/v1/webhooks/{created['id']}", headers=bearer(tenant.admin)
    ).status_code == (404)
    _subscribe(client, tenant, receiver.url, ["job.cancelled"])


def test_two_delivery_passes_at_once_send_each_delivery_once(
    client: TestClient, settings: Settings, tenant: Tenant, receiver: Receiver
) -> None:
    created = _subscribe(client, tenant, receiver.url, ["job.cancelled"])
    dataset = _dataset(settings, tenant, total_rho="10")
    jobs = [_submit(client, tenant, dataset) for _ in range(12)]
    for job in jobs:
        _cancel(client, tenant, job)
    # Two passes (two webhook worker threads) released together: SKIP LOCKED on PostgreSQL, the
    # write lock on SQLite; either way no delivery is claimed twice.
    barrier = threading.Barrier(2)
    reports: list[delivery.DeliveryReport] = []

    def one_pass() -> None:
        barrier.wait(30)
        reports.append(delivery.deliver_due(settings))

    threads = [threading.Thread(target=one_pass) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sum(r.delivered for r in reports) == 12
    sent = [r.headers["Rhosynth-Delivery-Id"] for r in receiver.received]
    assert len(sent) == len(set(sent)) == 12
    assert sorted(r.event["data"]["job"]["id"] for r in receiver.received) == sorted(jobs)
    log = _deliveries(client, tenant, created["id"])
    assert {(d["status"], d["attempts"]) for d in log} == {("delivered", 1)}


def test_a_pass_does_not_send_a_claimed_delivery_whose_lease_ran_out_meanwhile(
    client: TestClient, settings: Settings, tenant: Tenant, receiver: Receiver, clock: Clock
) -> None:
    """A pass claims a batch and sends it one by one. When a slow receiver keeps it past the
    claim's lease, the batch's later deliveries are due again and another pass sends them: the
    first pass must then leave them, not send them a second time."""
    _subscribe(client, tenant, receiver.url, ["job.cancelled"])
    dataset = _dataset(settings, tenant)
    for job in [_submit(client, tenant, dataset) for _ in range(2)]:
        _cancel(client, tenant, job)
    first: list[str] = []
    second_in_flight = threading.Event()
    first_pass_done = threading.Event()
    other: list[threading.Thread] = []

    def decide(got: Received) -> int:
        delivery_id = got.headers["Rhosynth-Delivery-Id"]
        if not first:
            first.append(delivery_id)
            # This answer takes longer than the claim's lease; another pass starts meanwhile
            # and is sending the batch's second delivery when this one is answered.
            clock.advance(delivery.CLAIM_LEASE_SECONDS + 1)
            other.append(threading.Thread(target=delivery.deliver_due, args=(settings,)))
            other[0].start()
            assert second_in_flight.wait(30)
        elif delivery_id != first[0] and not second_in_flight.is_set():
            second_in_flight.set()
            first_pass_done.wait(30)
        return 200

    receiver.decide = decide
    delivery.deliver_due(settings)
    first_pass_done.set()
    other[0].join(60)
    sent = [r.headers["Rhosynth-Delivery-Id"] for r in receiver.received]
    # The first one was sent again by the other pass (its lease had run out: at least once);
    # the second only by the other pass, which held it.
    assert sent.count(first[0]) == 2
    assert len(sent) == 3, sent


def test_nothing_is_sent_for_a_deleted_subscription_and_pages_are_bounded(
    client: TestClient, settings: Settings, tenant: Tenant, receiver: Receiver
) -> None:
    """An event written by a transaction that read the subscription before its deletion
    committed leaves a pending delivery the deletion could not see (it discards only the
    committed ones): the pass must not send it to a deleted subscription."""
    created = _subscribe(client, tenant, receiver.url, ["job.cancelled"])
    dataset = _dataset(settings, tenant)
    _cancel(client, tenant, _submit(client, tenant, dataset))
    with transaction(get_session_factory(settings.sqlalchemy_url)) as session:
        webhook_repository.delete_subscription(session, uuid.UUID(created["id"]), datetime.now(UTC))
        # The late event's delivery, as the race leaves it.
        session.execute(
            WebhookDelivery.__table__.update()
            .where(WebhookDelivery.subscription_id == uuid.UUID(created["id"]))
            .values(status="pending")
        )
    assert delivery.deliver_due(settings).delivered == 0
    assert receiver.received == []

    live = _subscribe(client, tenant, receiver.url, ["job.cancelled"])
    for offset in (2**31 + 1, 10**30):
        response = client.get(
            f"/v1/webhooks/{live['id']}/deliveries",
            params={"offset": offset},
            headers=bearer(tenant.admin),
        )
        assert response.status_code == 422, (offset, response.text)


def test_a_finish_that_lost_the_race_writes_no_second_event(
    client: TestClient, settings: Settings, tenant: Tenant, receiver: Receiver
) -> None:
    """The worker ends an attempt it could not publish (cancelled meanwhile); when the recovery
    loop has ended the attempt first (its guarded UPDATE won, with its event), the worker's
    finish changes nothing and must not write the job's end event a second time."""
    if settings.embedded:
        pytest.skip("SQLite serialises writers: the two finishes cannot interleave")
    from app.jobs import repository as job_repository

    _subscribe(client, tenant, receiver.url, ["job.cancelled", "job.failed"])
    job_id = uuid.UUID(_submit(client, tenant, _dataset(settings, tenant)))
    factory = get_session_factory(settings.sqlalchemy_url)
    claim = execution.claim_and_charge(factory, settings, job_id)
    assert claim is not None
    with transaction(factory) as session:
        job_repository.request_cancel(session, job_id)
    real_finish = job_repository.finish

    def recovery_wins(session: Any, *args: Any, **kwargs: Any) -> bool:
        with transaction(factory) as other:
            assert real_finish(
                other,
                job_id,
                claim.attempt,
                status="failed",
                error="lease lost",
                now=datetime.now(UTC),
            )
            outbox.record_job_ended(other, job_id)
        return real_finish(session, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(execution.repository, "finish", recovery_wins)
        execution._finish_unpublished(factory, settings, claim)
    assert _outbox_counts(settings) == (1, 1)


def test_webhook_changes_are_in_the_audit_trail(
    client: TestClient, settings: Settings, tenant: Tenant, receiver: Receiver
) -> None:
    """Pointing the tenant's events at a URL is a privileged action like a key change: each
    subscription change and replay is an audit entry of the admin who made it."""
    from rhosynth.audit import verify_audit_chain

    created = _subscribe(client, tenant, receiver.url, ["job.cancelled"])
    _cancel(client, tenant, _submit(client, tenant, _dataset(settings, tenant)))
    delivery_id = _deliveries(client, tenant, created["id"])[0]["id"]
    admin = bearer(tenant.admin)
    assert client.post(f"/v1/webhooks/{created['id']}/rotate-secret", headers=admin).is_success
    assert client.post(f"/v1/webhooks/deliveries/{delivery_id}/replay", headers=admin).is_success
    assert client.delete(f"/v1/webhooks/{created['id']}", headers=admin).status_code == 204
    response = client.get("/v1/audit", headers=admin)
    assert response.status_code == 200
    entries = [json.loads(line) for line in response.text.splitlines()]
    verify_audit_chain(entries)
    webhook = [e for e in entries if e["action"].startswith("webhook.")]
    assert [(e["action"], e["object_id"]) for e in webhook] == [
        ("webhook.create", created["id"]),
        ("webhook.rotate_secret", created["id"]),
        ("webhook.replay", created["id"]),
        ("webhook.delete", created["id"]),
    ]
    assert webhook[0]["details"] == {"url": receiver.url, "events": ["job.cancelled"]}
    assert webhook[2]["details"] == {"delivery_id": delivery_id}
    assert all(e["actor_name"] == "admin" for e in webhook)
    assert created["secret"] not in response.text


def test_a_forged_header_with_non_ascii_text_is_refused_as_unverified() -> None:
    """A receiver catches WebhookVerificationError; a header from anyone on the network must
    not raise anything else (hmac.compare_digest refuses non-ASCII str with a TypeError)."""
    body = b'{"id":"x"}'
    now = 1_800_000_000
    for header in (f"t={now},v1=\u00e9", f"t={now},v1=\u0661\u0662"):
        with pytest.raises(WebhookVerificationError):
            verify_webhook("whsec_x", body, header, now=now)
