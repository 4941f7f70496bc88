"""A portal's day over HTTP (issue 27), in both modes: embedded (``rhosynth run`` on SQLite with
its own worker) and PostgreSQL with a real Celery worker (tests/conftest.py's worker stack).

The API answers in this process (so the test can move the clock that authentication and the
webhook sender read), on the same database, broker and storage as the running service, whose
worker runs the approved job. An admin key made as ``rhosynth keys create --role admin`` makes
an owner and two analysts over /v1/keys; the owner uploads a table with a quota for each analyst
and approval on; both analysts submit; the owner approves one and rejects one; the approved job
runs and is downloaded; webhooks reach a receiver that was down for the first events; a key is
rotated; the audit export verifies and holds each of the day's actions; the ledger reconciles.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from app import cli
from app.auth import service as auth_service
from app.budget.service import reconcile
from app.config import Settings, get_settings
from app.db.session import get_session_factory, transaction
from app.main import create_app
from app.webhooks import delivery
from rhosynth.audit import verify_audit_chain
from rhosynth.client import verify_webhook
from tests.support.clock import Clock
from tests.support.stack import REPO, Stack, free_port

FIXTURES = REPO / "tests" / "fixtures"


@dataclass
class Receiver:
    """A webhook receiver on a fixed port, started later in the day."""

    port: int
    received: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    def start(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.received.append((dict(self.headers.items()), body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *_args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


@dataclass
class Service:
    settings: Settings
    env: dict[str, str]


def _embedded(home: Path) -> Iterator[Service]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RHOSYNTH_")}
    env.update({"RHOSYNTH_HOME": str(home), "RHOSYNTH_PORT": str(port), "PYTHONUNBUFFERED": "1"})
    log = open(home / "run.log", "wb")  # noqa: SIM115
    process = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "run"],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        else:
            raise AssertionError((home / "run.log").read_text())
        yield Service(Settings(home=home), env)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
        log.close()


@pytest.fixture(params=["embedded", "postgresql"])
def service(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Service]:
    if request.param == "embedded":
        yield from _embedded(tmp_path_factory.mktemp("portal-home"))
    else:
        stack: Stack = request.getfixturevalue("worker_stack")
        yield Service(stack.settings, {**os.environ, **stack.env})


def _cli_admin_key(service: Service, tenant: str) -> str:
    """As ``rhosynth keys create --role admin`` does on the server's shell."""
    env = {k: v for k, v in service.env.items() if k.startswith("RHOSYNTH_")}
    get_settings.cache_clear()  # the CLI reads its settings once per process
    try:
        result = CliRunner().invoke(
            cli.main,
            ["keys", "create", "--tenant", tenant, "--role", "admin", "--name", "root"],
            env=env,
            catch_exceptions=False,
        )
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 0, result.output
    return result.stdout.strip().splitlines()[-1]


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _ok(response: httpx.Response, code: int = 200) -> Any:
    assert response.status_code == code, response.text
    return response.json() if response.content else None


def _wait_job(client: TestClient, key: str, job_id: str, timeout: float = 180) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    job: dict[str, Any] = {}
    while time.monotonic() < deadline:
        job = _ok(client.get(f"/v1/jobs/{job_id}", headers=_bearer(key)))
        if job["status"] in ("succeeded", "failed", "cancelled"):
            return job
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} did not finish: {job}")


def test_a_portals_day(service: Service, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = service.settings
    clock = Clock()
    monkeypatch.setattr(auth_service, "utcnow", clock)
    monkeypatch.setattr(delivery, "utcnow", clock)
    tenant = f"portal-{uuid.uuid4().hex[:8]}"
    admin = _bearer(_cli_admin_key(service, tenant))
    receiver = Receiver(free_port())

    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        # Morning: the admin makes the day's keys and subscribes the receiver (not up yet).
        made = {
            name: _ok(
                client.post("/v1/keys", json={"name": name, "role": role}, headers=admin), 201
            )
            for name, role in [("olive", "owner"), ("ann", "analyst"), ("bob", "analyst")]
        }
        owner, ann, bob = (_bearer(made[n]["key"]) for n in ("olive", "ann", "bob"))
        events = ["approval.requested", "approval.decided", "job.succeeded", "job.failed"]
        hook_url = f"http://127.0.0.1:{receiver.port}/hook"
        hook = _ok(
            client.post("/v1/webhooks", json={"url": hook_url, "events": events}, headers=admin),
            201,
        )
        secret = hook["secret"]

        # The owner uploads a table, gives each analyst a quota and turns approval on.
        uploaded = client.post(
            "/v1/datasets",
            files={"file": ("people.csv", (FIXTURES / "people.csv").read_bytes(), "text/csv")},
            data={
                "schema": (FIXTURES / "people-schema.json").read_text(),
                "name": "people",
                "budget_rho": "1",
            },
            headers=owner,
        )
        dataset = _ok(uploaded, 201)
        ds = dataset["id"]
        for name in ("ann", "bob"):
            url = f"/v1/datasets/{ds}/quotas/{made[name]['id']}"
            _ok(client.put(url, json={"rho": "0.3"}, headers=owner))
        policy = {"mode": "shared", "quota_required": True, "approval_required": True}
        _ok(client.put(f"/v1/datasets/{ds}/quota-policy", json=policy, headers=owner))

        # Both analysts submit; their jobs wait for the owner, budget reserved.
        request = {"method": "independent", "budget": {"rho": "0.2"}}
        jobs = {
            name: _ok(client.post(f"/v1/datasets/{ds}/jobs", json=request, headers=key), 202)
            for name, key in (("ann", ann), ("bob", bob))
        }
        assert {j["status"] for j in jobs.values()} == {"pending_approval"}
        ann_job, bob_job = jobs["ann"]["id"], jobs["bob"]["id"]
        # A third job of Ann's would pass her quota: refused at once.
        refused = client.post(f"/v1/datasets/{ds}/jobs", json=request, headers=ann)
        assert refused.status_code == 409 and refused.json()["limit"] == "quota"

        # The receiver is down: the first sending pass fails (the events stay owed). The
        # sender's clock is set to now first: the events were written at the real time.
        clock.now = max(clock.now, datetime.now(UTC))
        delivery.deliver_due(settings)
        assert receiver.received == []
        # (The service's own webhook worker may be the one that tried: re-read while a try it
        # claimed is still being recorded.)
        for _ in range(50):
            log = _ok(client.get(f"/v1/webhooks/{hook['id']}/deliveries", headers=admin))
            owed = log["items"]
            if all(d["attempts"] >= 1 for d in owed):
                break
            time.sleep(0.1)
        assert sorted(d["event_type"] for d in owed) == ["approval.requested"] * 2
        assert all(d["status"] == "pending" and d["attempts"] >= 1 for d in owed), owed

        # The owner reviews the requests with their dry-run preview and decides.
        pending = _ok(client.get(f"/v1/datasets/{ds}/approvals", headers=owner))["items"]
        assert [p["job"]["id"] for p in pending] == [ann_job, bob_job]
        assert all(p["preview"]["rho"] == "0.2" for p in pending)
        assert _ok(client.post(f"/v1/jobs/{ann_job}/approve", headers=owner))["status"] == "queued"
        reason = {"reason": "ask for fewer columns"}
        rejected = _ok(client.post(f"/v1/jobs/{bob_job}/reject", json=reason, headers=owner))
        assert rejected["status"] == "rejected"
        seen = _ok(client.get(f"/v1/jobs/{bob_job}", headers=bob))
        assert (seen["status"], seen["decision_reason"]) == ("rejected", "ask for fewer columns")

        # The approved job runs on the service's worker; Ann downloads it.
        done = _wait_job(client, made["ann"]["key"], ann_job)
        assert done["status"] == "succeeded", done
        output = client.get(f"/v1/jobs/{ann_job}/output", headers=ann)
        assert output.status_code == 200 and output.content.count(b"\n") > 1

        # The receiver comes back; sending passes later in the day deliver everything owed.
        receiver.start()
        try:
            for _ in range(12):
                clock.advance(3600)
                delivery.deliver_due(settings)
                log = _ok(client.get(f"/v1/webhooks/{hook['id']}/deliveries", headers=admin))
                if all(d["status"] == "delivered" for d in log["items"]) and len(log["items"]) == 5:
                    break
        finally:
            receiver.stop()
        assert {d["status"] for d in log["items"]} == {"delivered"}
        arrived: list[dict[str, Any]] = []
        for headers, body in receiver.received:
            header = headers["Rhosynth-Signature"]
            stamp = int(header.split(",")[0].removeprefix("t="))
            arrived.append(verify_webhook(secret, body, header, now=stamp))
        ids = [e["id"] for e in arrived]
        assert len(set(ids)) == 5, [e["type"] for e in arrived]
        per_job: dict[str, list[str]] = {}
        for event in dict(zip(ids, arrived, strict=True)).values():
            per_job.setdefault(event["data"]["job"]["id"], []).append(event["type"])
        assert per_job == {
            ann_job: ["approval.requested", "approval.decided", "job.succeeded"],
            bob_job: ["approval.requested", "approval.decided"],
        }

        # Ann's key is rotated: the old secret works through the overlap, then not.
        rotated = _ok(
            client.post(
                f"/v1/keys/{made['ann']['id']}/rotate", json={"overlap_seconds": 600}, headers=admin
            ),
            201,
        )
        assert client.get(f"/v1/jobs/{ann_job}", headers=ann).status_code == 200
        clock.advance(599)
        assert client.get(f"/v1/jobs/{ann_job}", headers=ann).status_code == 200
        clock.advance(2)
        assert client.get(f"/v1/jobs/{ann_job}", headers=ann).status_code == 401
        new_ann = _bearer(rotated["key"])
        assert client.get(f"/v1/jobs/{ann_job}", headers=new_ann).status_code == 200

        # The ledger: the quotas and the dataset never overspent; Bob's reservation released.
        quotas = _ok(client.get(f"/v1/datasets/{ds}/quotas", headers=owner))
        by_key = {q["key_id"]: q for q in quotas["items"]}
        ann_quota, bob_quota = by_key[made["ann"]["id"]], by_key[made["bob"]["id"]]
        assert (ann_quota["reserved_rho"], ann_quota["spent_rho"]) == ("0", "0.2")
        assert (bob_quota["reserved_rho"], bob_quota["spent_rho"]) == ("0", "0")
        factory = get_session_factory(settings.sqlalchemy_url)
        with transaction(factory) as session:
            checked = reconcile(session, uuid.UUID(ds))
        assert checked.consistent
        ledger = _ok(client.get(f"/v1/datasets/{ds}/ledger", headers=owner))
        ledger_text = json.dumps(ledger)
        assert bob_job in ledger_text
        current = _ok(client.get(f"/v1/datasets/{ds}", headers=owner))
        spent = Decimal(current["budget"]["spent_rho"])
        assert spent <= Decimal(current["budget"]["total_rho"])
        assert Decimal(current["budget"]["reserved_rho"]) == 0

        # The audit export verifies and holds each of the day's actions.
        export = client.get("/v1/audit", params={"format": "jsonl"}, headers=admin)
        assert export.status_code == 200, export.text
        entries = [json.loads(line) for line in export.text.splitlines() if line]
        verify_audit_chain(entries)
        done_actions = [(e["action"], e["object_id"]) for e in entries]
        expected = [
            ("key.create", made["olive"]["id"]),
            ("key.create", made["ann"]["id"]),
            ("key.create", made["bob"]["id"]),
            ("dataset.create", ds),
            ("quota.policy", ds),
            ("job.submit", ann_job),
            ("job.submit", bob_job),
            ("job.approve", ann_job),
            ("job.reject", bob_job),
            ("job.download", ann_job),
            ("key.rotate", made["ann"]["id"]),
        ]
        for action in expected:
            assert action in done_actions, action
        assert [a for a, _ in done_actions].count("quota.set") == 2
        assert entries[0]["action"] == "key.create" and entries[0]["actor"] == "cli"
