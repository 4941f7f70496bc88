"""Issue 27 §3: owner approval, per dataset. A job of an analyst key waits in
``pending_approval`` with its budget reserved (on the dataset and its quota); an owner approves
it (queued, then claimed and charged like any job) or rejects it with a reason the analyst sees
(the reservation released: it never ran); undecided, it expires in the recovery pass. On
PostgreSQL and SQLite, over HTTP against the app in this process."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from app.budget import repository as budget_repository
from app.config import Settings
from app.db.session import get_session_factory, transaction
from app.jobs import approvals
from app.jobs import repository as job_repository
from app.jobs.execution import claim_and_charge
from app.jobs.recovery import recover_jobs
from app.main import create_app
from tests.app.test_quotas import _dataset, _keys, bearer
from tests.support import services

pytestmark = pytest.mark.usefixtures("_services")


@pytest.fixture(params=["postgresql", "sqlite"])
def settings(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Settings]:
    with services.migrated_settings(request.param, tmp_path, "approvals") as settings:
        yield settings


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings), raise_server_exceptions=False) as test_client:
        yield test_client


def _submit(client: TestClient, key: str, dataset_id: uuid.UUID, rho: str) -> Any:
    return client.post(
        f"/v1/datasets/{dataset_id}/jobs",
        json={"method": "independent", "budget": {"rho": rho}},
        headers=bearer(key),
    )


def _account(settings: Settings, dataset_id: uuid.UUID) -> tuple[Decimal, Decimal]:
    with transaction(get_session_factory(settings.sqlalchemy_url)) as session:
        account = budget_repository.get_account(session, dataset_id)
    assert account is not None
    return account.reserved_rho, account.spent_rho


def test_pending_jobs_reserve_and_an_owner_decides(client: TestClient, settings: Settings) -> None:
    keys = _keys(settings, 1)
    owner, analyst = bearer(keys.owner_key), keys.analyst_keys[0]
    dataset_id = _dataset(settings, keys.owner, Decimal(1))
    policy = {"mode": "shared", "approval_required": True}
    response = client.put(f"/v1/datasets/{dataset_id}/quota-policy", json=policy, headers=owner)
    assert response.status_code == 200 and response.json()["approval_required"] is True
    # The quota is charged at submission too: a third job is refused at once, not at approval.
    key_id = keys.analysts[0].key_id
    assert (
        client.put(
            f"/v1/datasets/{dataset_id}/quotas/{key_id}", json={"rho": "0.5"}, headers=owner
        ).status_code
        == 200
    )

    first = _submit(client, analyst, dataset_id, "0.25")
    second = _submit(client, analyst, dataset_id, "0.25")
    assert first.status_code == second.status_code == 202
    assert first.json()["status"] == "pending_approval"
    assert first.json()["progress"]["stage"] == "pending_approval"
    refused = _submit(client, analyst, dataset_id, "0.25")
    assert refused.status_code == 409 and refused.json()["limit"] == "quota"
    assert _account(settings, dataset_id) == (Decimal("0.5"), Decimal(0))

    # A pending job is not claimable.
    factory = get_session_factory(settings.sqlalchemy_url)
    first_id, second_id = uuid.UUID(first.json()["id"]), uuid.UUID(second.json()["id"])
    assert claim_and_charge(factory, settings, first_id) is None

    # Owners see the pending jobs with their cost preview; analysts cannot decide.
    listed = client.get(f"/v1/datasets/{dataset_id}/approvals", headers=owner)
    assert listed.status_code == 200, listed.text
    items = listed.json()["items"]
    assert [i["job"]["id"] for i in items] == [str(first_id), str(second_id)]
    assert items[0]["preview"]["rho"] == "0.25"
    assert client.post(f"/v1/jobs/{first_id}/approve", headers=bearer(analyst)).status_code == 403

    approved = client.post(f"/v1/jobs/{first_id}/approve", headers=owner)
    assert approved.status_code == 200, approved.text
    assert approved.json()["status"] == "queued" and approved.json()["decided_at"] is not None
    rejected = client.post(
        f"/v1/jobs/{second_id}/reject", json={"reason": "ask for fewer columns"}, headers=owner
    )
    assert rejected.status_code == 200, rejected.text
    # Deciding twice is refused.
    assert client.post(f"/v1/jobs/{second_id}/approve", headers=owner).status_code == 409

    # The analyst sees the decision and its reason.
    seen = client.get(f"/v1/jobs/{second_id}", headers=bearer(analyst)).json()
    assert seen["status"] == "rejected"
    assert seen["decision_reason"] == "ask for fewer columns"
    # The rejected job's reservation went back; the approved one is claimed and charged.
    assert _account(settings, dataset_id) == (Decimal("0.25"), Decimal(0))
    assert claim_and_charge(factory, settings, first_id) is not None
    assert _account(settings, dataset_id) == (Decimal(0), Decimal("0.25"))
    listed = client.get(f"/v1/datasets/{dataset_id}/quotas", headers=owner).json()
    (quota,) = listed["items"]
    assert (quota["reserved_rho"], quota["spent_rho"]) == ("0", "0.25")


def test_undecided_jobs_expire_and_are_released(client: TestClient, settings: Settings) -> None:
    keys = _keys(settings, 1)
    owner, analyst = bearer(keys.owner_key), keys.analyst_keys[0]
    dataset_id = _dataset(settings, keys.owner, Decimal(1))
    policy = {"mode": "shared", "approval_required": True}
    assert (
        client.put(
            f"/v1/datasets/{dataset_id}/quota-policy", json=policy, headers=owner
        ).status_code
        == 200
    )
    job_id = uuid.UUID(_submit(client, analyst, dataset_id, "0.5").json()["id"])
    cancelled_id = uuid.UUID(_submit(client, analyst, dataset_id, "0.25").json()["id"])
    # The analyst may withdraw a pending job: released at once.
    response = client.post(f"/v1/jobs/{cancelled_id}/cancel", headers=bearer(analyst))
    assert response.status_code == 202 and response.json()["status"] == "cancelled"
    assert _account(settings, dataset_id) == (Decimal("0.5"), Decimal(0))

    # Not yet due: nothing happens.
    assert recover_jobs(settings).unapproved == []
    factory = get_session_factory(settings.sqlalchemy_url)
    with transaction(factory) as session:
        job = job_repository.get(session, job_id)
        assert job is not None
        job.created_at -= timedelta(seconds=settings.approval_ttl_seconds + 1)
    assert recover_jobs(settings).unapproved == [job_id]
    seen = client.get(f"/v1/jobs/{job_id}", headers=bearer(analyst)).json()
    assert seen["status"] == "expired"
    assert seen["decision_reason"] == "no owner approved or rejected the job within 7 days"
    assert _account(settings, dataset_id) == (Decimal(0), Decimal(0))
    assert approvals.expire_pending(factory, settings) == []
    # Approving an expired job is refused.
    assert client.post(f"/v1/jobs/{job_id}/approve", headers=owner).status_code == 409


def test_an_approved_job_queues_its_full_ttl_from_its_approval(
    client: TestClient, settings: Settings
) -> None:
    """The queued TTL counts from the approval, not the submission: a job approved after days
    of waiting must not be expired as "queued too long" by the next recovery pass."""
    keys = _keys(settings, 1)
    owner, analyst = bearer(keys.owner_key), keys.analyst_keys[0]
    dataset_id = _dataset(settings, keys.owner, Decimal(1))
    policy = {"mode": "shared", "approval_required": True}
    assert (
        client.put(
            f"/v1/datasets/{dataset_id}/quota-policy", json=policy, headers=owner
        ).status_code
        == 200
    )
    job_id = uuid.UUID(_submit(client, analyst, dataset_id, "0.5").json()["id"])
    factory = get_session_factory(settings.sqlalchemy_url)
    # It waited almost the approval TTL (still undecided, so still approvable) ...
    with transaction(factory) as session:
        job = job_repository.get(session, job_id)
        assert job is not None
        job.created_at -= timedelta(seconds=settings.approval_ttl_seconds - 60)
    assert client.post(f"/v1/jobs/{job_id}/approve", headers=owner).status_code == 200
    # ... and two minutes after its approval, the recovery pass runs.
    with transaction(factory) as session:
        job = job_repository.get(session, job_id)
        assert job is not None and job.decided_at is not None
        job.created_at -= timedelta(seconds=120)
        job.decided_at -= timedelta(seconds=120)
    report = recover_jobs(settings)
    assert job_id not in report.expired
    seen = client.get(f"/v1/jobs/{job_id}", headers=bearer(analyst)).json()
    assert seen["status"] == "queued"
    assert _account(settings, dataset_id) == (Decimal("0.5"), Decimal(0))


def test_a_submission_waiting_on_a_policy_change_obeys_it(
    client: TestClient, settings: Settings
) -> None:
    """Approval turned on while a submission waits for the account lock: the submission's
    reservation is ordered after the change, so its job must wait for approval too (it read
    the policy before the lock and was queued unapproved)."""
    if settings.sqlalchemy_url.startswith("sqlite"):
        pytest.skip("SQLite serialises the two writers whole (BEGIN IMMEDIATE)")
    keys = _keys(settings, 1)
    analyst = keys.analyst_keys[0]
    dataset_id = _dataset(settings, keys.owner, Decimal(1))
    factory = get_session_factory(settings.sqlalchemy_url)
    out: dict[str, Any] = {}

    def submit() -> None:
        out["response"] = _submit(client, analyst, dataset_id, "0.25")

    # The owner's policy change holds the account lock, as PUT /quota-policy does ...
    with transaction(factory) as session:
        assert budget_repository.lock_account(session, dataset_id) is not None
        budget_repository.set_policy(session, dataset_id, "shared", False, True)
        waiter = threading.Thread(target=submit)
        waiter.start()
        # ... until the submission is seen waiting for it (on a lock, not a clock).
        with factory() as watcher:
            while waiter.is_alive() and not watcher.scalar(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock'"
                )
            ):
                watcher.rollback()
    waiter.join()
    response = out["response"]
    assert response.status_code == 202, response.text
    assert response.json()["status"] == "pending_approval"
    job_id = uuid.UUID(response.json()["id"])
    assert claim_and_charge(factory, settings, job_id) is None


def test_a_pending_jobs_preview_does_not_count_its_reservation_twice(
    client: TestClient, settings: Settings
) -> None:
    """The preview an owner decides on already has the job's reservation taken out of the
    remaining ρ: it must not then say the job would exceed the budget (it is reserved; an
    approval can never fail for budget)."""
    keys = _keys(settings, 1)
    owner, analyst = bearer(keys.owner_key), keys.analyst_keys[0]
    dataset_id = _dataset(settings, keys.owner, Decimal(1))
    policy = {"mode": "shared", "approval_required": True}
    assert (
        client.put(
            f"/v1/datasets/{dataset_id}/quota-policy", json=policy, headers=owner
        ).status_code
        == 200
    )
    job_id = _submit(client, analyst, dataset_id, "0.75").json()["id"]
    (item,) = client.get(f"/v1/datasets/{dataset_id}/approvals", headers=owner).json()["items"]
    assert item["job"]["id"] == job_id
    assert item["preview"]["remaining_rho"] == "0.25"
    assert item["preview"]["would_exceed_budget"] is False
    assert item["preview"]["remaining_rho_after"] == "0.25"


def test_owner_jobs_need_no_approval(client: TestClient, settings: Settings) -> None:
    keys = _keys(settings, 0)
    owner = bearer(keys.owner_key)
    dataset_id = _dataset(settings, keys.owner, Decimal(1))
    policy = {"mode": "shared", "approval_required": True}
    client.put(f"/v1/datasets/{dataset_id}/quota-policy", json=policy, headers=owner)
    assert _submit(client, keys.owner_key, dataset_id, "0.25").json()["status"] == "queued"


def test_the_migration_downgrades_and_upgrades(client: TestClient, settings: Settings) -> None:
    from alembic import command
    from alembic.config import Config
    from sqlalchemy import text

    import migrations
    from app.db.session import dispose_engines

    keys = _keys(settings, 1)
    owner, analyst = bearer(keys.owner_key), keys.analyst_keys[0]
    dataset_id = _dataset(settings, keys.owner, Decimal(1))
    policy = {"mode": "reserved", "approval_required": True}
    client.put(f"/v1/datasets/{dataset_id}/quota-policy", json=policy, headers=owner)
    client.put(
        f"/v1/datasets/{dataset_id}/quotas/{keys.analysts[0].key_id}",
        json={"rho": "0.5"},
        headers=owner,
    )
    job_id = _submit(client, analyst, dataset_id, "0.25").json()["id"]
    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).parent))
    config.attributes["database_url"] = settings.sqlalchemy_url
    factory = get_session_factory(settings.sqlalchemy_url)
    command.downgrade(config, "0013_webhooks")
    dispose_engines()
    with transaction(factory) as session:
        rows = session.execute(text("SELECT status FROM jobs")).scalars().all()
        assert rows == ["cancelled"]
    # Its reservation was released, entry and account together.
    assert _account(settings, dataset_id) == (Decimal(0), Decimal(0))
    with transaction(factory) as session:
        from app.budget.service import reconcile

        assert reconcile(session, dataset_id).consistent
    # The old status CHECK is back.
    with pytest.raises(Exception, match=r"(?i)check"), transaction(factory) as session:
        session.execute(text("UPDATE jobs SET status = 'pending_approval'"))
    command.upgrade(config, "head")
    dispose_engines()
    with transaction(factory) as session:
        assert session.execute(text("SELECT count(*) FROM budget_quotas")).scalar_one() == 0
        session.execute(text("UPDATE jobs SET status = 'expired'"))
    assert client.get(f"/v1/jobs/{job_id}", headers=bearer(analyst)).json()["status"] == "expired"


def test_a_pending_job_is_not_in_the_queue_before_its_decision(
    client: TestClient, settings: Settings
) -> None:
    """The queue place counts the queue as it stood at a past minute T: a job approved after T
    was pending, not queued, at T (it would otherwise change T's answer when approved)."""
    keys = _keys(settings, 1)
    owner, analyst = bearer(keys.owner_key), keys.analyst_keys[0]
    dataset_id = _dataset(settings, keys.owner, Decimal(1))
    policy = {"mode": "shared", "approval_required": True}
    client.put(f"/v1/datasets/{dataset_id}/quota-policy", json=policy, headers=owner)
    mine = uuid.UUID(_submit(client, keys.owner_key, dataset_id, "0.25").json()["id"])
    held = uuid.UUID(_submit(client, analyst, dataset_id, "0.25").json()["id"])
    assert client.post(f"/v1/jobs/{held}/approve", headers=owner).status_code == 200
    factory = get_session_factory(settings.sqlalchemy_url)
    with transaction(factory) as session:
        for job_id in (mine, held):
            job = job_repository.get(session, job_id)
            assert job is not None
            job.created_at -= timedelta(minutes=10)
    with transaction(factory) as session:
        job = job_repository.get(session, mine)
        approved = job_repository.get(session, held)
        assert job is not None and approved is not None and approved.decided_at is not None

        def queued_at(as_of: Any) -> int:
            tenants = job_repository.queue_at(session, job.id, job.tenant_id, job.created_at, as_of)
            return sum(t.queued for t in tenants)

        assert queued_at(approved.decided_at - timedelta(minutes=5)) == 1
        assert queued_at(approved.decided_at + timedelta(minutes=1)) == 2


def _trail(settings: Settings, tenant_id: uuid.UUID) -> list[dict[str, Any]]:
    from app.audit import service as audit_service

    factory = get_session_factory(settings.sqlalchemy_url)
    return list(audit_service.export_entries(factory, tenant_id))


def test_quota_changes_and_decisions_are_audited(client: TestClient, settings: Settings) -> None:
    keys = _keys(settings, 2)
    owner = bearer(keys.owner_key)
    owner_actor = f"key:{keys.owner.key_id}"
    first, second = (a.key_id for a in keys.analysts)
    dataset_id = _dataset(settings, keys.owner, Decimal(1))
    policy = {"mode": "shared", "quota_required": True, "approval_required": True}
    url = f"/v1/datasets/{dataset_id}"
    assert client.put(f"{url}/quota-policy", json=policy, headers=owner).status_code == 200
    assert client.put(f"{url}/quotas/{first}", json={"rho": "0.5"}, headers=owner).status_code
    group = {"rho": "0.25", "keys": [str(second)]}
    assert client.put(f"{url}/quota-groups/team", json=group, headers=owner).status_code == 200
    approved = _submit(client, keys.analyst_keys[0], dataset_id, "0.125").json()["id"]
    rejected = _submit(client, keys.analyst_keys[0], dataset_id, "0.125").json()["id"]
    expired = _submit(client, keys.analyst_keys[1], dataset_id, "0.125").json()["id"]
    assert client.post(f"/v1/jobs/{approved}/approve", headers=owner).status_code == 200
    reason = {"reason": "too many columns"}
    assert client.post(f"/v1/jobs/{rejected}/reject", json=reason, headers=owner).status_code
    factory = get_session_factory(settings.sqlalchemy_url)
    with transaction(factory) as session:
        job = job_repository.get(session, uuid.UUID(expired))
        assert job is not None
        job.created_at -= timedelta(seconds=settings.approval_ttl_seconds + 1)
    assert recover_jobs(settings).unapproved == [uuid.UUID(expired)]
    assert client.delete(f"{url}/quotas/{first}", headers=owner).status_code == 204
    assert client.delete(f"{url}/quota-groups/team", headers=owner).status_code == 204

    entries = _trail(settings, keys.owner.tenant_id)
    got = [
        (e["actor"], e["action"], e["object_type"], e["details"])
        for e in entries
        if e["action"] not in ("key.create", "dataset.create", "job.submit")
    ]
    quota_ids = [e["object_id"] for e in entries if e["action"] == "quota.set"]
    assert [e["object_id"] for e in entries if e["action"] == "quota.remove"] == quota_ids
    ds = str(dataset_id)
    assert got == [
        (
            owner_actor,
            "quota.policy",
            "dataset",
            {"mode": "shared", "quota_required": True, "approval_required": True},
        ),
        (
            owner_actor,
            "quota.set",
            "quota",
            {
                "dataset_id": ds,
                "key_id": str(first),
                "group_name": None,
                "members": [str(first)],
                "granted_rho": "0.5",
            },
        ),
        (
            owner_actor,
            "quota.set",
            "quota",
            {
                "dataset_id": ds,
                "key_id": None,
                "group_name": "team",
                "members": [str(second)],
                "granted_rho": "0.25",
            },
        ),
        (owner_actor, "job.approve", "job", {"dataset_id": ds}),
        (owner_actor, "job.reject", "job", {"dataset_id": ds}),
        (
            "system",
            "job.expire",
            "job",
            {"dataset_id": ds, "ttl_seconds": settings.approval_ttl_seconds},
        ),
        (
            owner_actor,
            "quota.remove",
            "quota",
            {"dataset_id": ds, "key_id": str(first), "group_name": None},
        ),
        (
            owner_actor,
            "quota.remove",
            "quota",
            {"dataset_id": ds, "key_id": None, "group_name": "team"},
        ),
    ]
    decided = {e["action"]: e["object_id"] for e in entries if e["object_type"] == "job"}
    assert (decided["job.approve"], decided["job.reject"]) == (approved, rejected)
    assert decided["job.expire"] == expired
    # The owner's free-text reason is not in the trail.
    assert "too many columns" not in str(entries)


def test_approval_events_are_written_with_the_decisions(
    client: TestClient, settings: Settings
) -> None:
    from sqlalchemy import select

    from app.webhooks import service as webhook_service
    from app.webhooks.models import WebhookEvent

    keys = _keys(settings, 1)
    owner, analyst = bearer(keys.owner_key), keys.analyst_keys[0]
    dataset_id = _dataset(settings, keys.owner, Decimal(1))
    factory = get_session_factory(settings.sqlalchemy_url)
    with transaction(factory) as session:
        webhook_service.create_subscription(
            session,
            keys.owner,
            url="http://127.0.0.1:9/hook",
            events=["approval.requested", "approval.decided", "job.cancelled"],
            description="",
            enabled=True,
            budget_threshold_rho=None,
            allowed_hosts=[],
        )
    policy = {"mode": "shared", "approval_required": True}
    client.put(f"/v1/datasets/{dataset_id}/quota-policy", json=policy, headers=owner)
    ids = [_submit(client, analyst, dataset_id, "0.125").json()["id"] for _ in range(4)]
    approved, rejected, expired, cancelled = ids
    # Withdrawn before any decision: a cancelled job like any other (job.cancelled).
    assert client.post(f"/v1/jobs/{cancelled}/cancel", headers=bearer(analyst)).status_code == 202
    assert client.post(f"/v1/jobs/{approved}/approve", headers=owner).status_code == 200
    reason = {"reason": "too many columns"}
    assert client.post(f"/v1/jobs/{rejected}/reject", json=reason, headers=owner).status_code
    with transaction(factory) as session:
        job = job_repository.get(session, uuid.UUID(expired))
        assert job is not None
        job.created_at -= timedelta(seconds=settings.approval_ttl_seconds + 1)
    recover_jobs(settings)
    with transaction(factory) as session:
        events = session.scalars(select(WebhookEvent).order_by(WebhookEvent.id)).all()
        got = [(e.type, str(e.ordering_key), e.payload["data"]["job"]) for e in events]
    assert [(t, k) for t, k, _ in got] == [
        ("approval.requested", approved),
        ("approval.requested", rejected),
        ("approval.requested", expired),
        ("approval.requested", cancelled),
        ("job.cancelled", cancelled),
        ("approval.decided", approved),
        ("approval.decided", rejected),
        ("approval.decided", expired),
    ]
    views = [job for _, _, job in got]
    assert all(v["id"] == k for (_, k, _), v in zip(got, views, strict=True))
    assert views[4]["status"] == "cancelled"
    assert [v["status"] for v in views[5:]] == ["queued", "rejected", "expired"]
    assert views[6]["decision_reason"] == "too many columns"
    assert all(v["decided_at"] is not None for v in views[5:])
    # The analyst's view: no owner-only progress detail.
    assert all(v["progress_detail"] is None for v in views)
