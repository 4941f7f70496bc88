"""Issue 27 §2: quotas under a dataset's cap, on the dataset's own ledger.

A key's (or a group's) quota reserves with the dataset's account at submission, spends with it
at the first claim and is released with it only for jobs that never ran. 200 submissions of
several analyst keys, released together by a barrier on PostgreSQL, never pass a quota or the
dataset's cap, and the number accepted is exactly what the arithmetic allows; the 409s name
the limit that refused and what is left of it; the ``reserved`` policy refuses grants past what
the dataset has left. Routes over HTTP against the app in this process, on PostgreSQL and SQLite.
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, text
from sqlalchemy.exc import DBAPIError, IntegrityError

from app.auth.service import Principal, authenticate, create_key
from app.budget import quotas
from app.budget import repository as budget_repository
from app.budget import service as budget_service
from app.budget.models import BudgetQuota, QuotaEntry
from app.config import Settings
from app.db.session import get_session_factory, transaction
from app.jobs import service as job_service
from app.jobs.execution import claim_and_charge
from app.jobs.schemas import JobRequest
from app.main import create_app
from tests.support import services
from tests.support.ledger import add_tableless_dataset

pytestmark = pytest.mark.usefixtures("_services")

RHO = Decimal("0.25")


@pytest.fixture(params=["postgresql", "sqlite"])
def settings(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Settings]:
    with services.migrated_settings(request.param, tmp_path, "quotas") as settings:
        yield settings


@dataclass
class Keys:
    owner: Principal
    owner_key: str
    analysts: list[Principal]
    analyst_keys: list[str]


def _keys(settings: Settings, analysts: int) -> Keys:
    factory = get_session_factory(settings.sqlalchemy_url)
    tenant = f"quotas-{uuid.uuid4().hex[:8]}"
    secrets: list[str] = []
    with transaction(factory) as session:
        for role, name in [("owner", "owner")] + [("analyst", f"a{i}") for i in range(analysts)]:
            secrets.append(create_key(session, settings.secret_key_bytes(), tenant, role, name).key)
    principals: list[Principal] = []
    with transaction(factory) as session:
        for secret in secrets:
            principal = authenticate(session, settings.secret_key_bytes(), secret)
            assert principal is not None
            principals.append(principal)
    return Keys(principals[0], secrets[0], principals[1:], secrets[1:])


def _dataset(settings: Settings, owner: Principal, total: Decimal) -> uuid.UUID:
    with transaction(get_session_factory(settings.sqlalchemy_url)) as session:
        return add_tableless_dataset(session, owner, total)


def _submit(settings: Settings, principal: Principal, dataset_id: uuid.UUID) -> uuid.UUID:
    with transaction(get_session_factory(settings.sqlalchemy_url)) as session:
        request = JobRequest(method="independent", budget={"rho": RHO})
        job, _ = job_service.submit_job(session, settings, principal, dataset_id, request, None)
        return job.id


def _quota_reconciles(settings: Settings, dataset_id: uuid.UUID) -> list[BudgetQuota]:
    """Each quota's columns equal its entries' sums, and it is within its grant."""
    with transaction(get_session_factory(settings.sqlalchemy_url)) as session:
        rows = list(
            session.scalars(select(BudgetQuota).where(BudgetQuota.dataset_id == dataset_id))
        )
        for quota in rows:
            entries = budget_repository.quota_entries(session, quota.id)
            sums = Counter[str]()
            for entry in entries:
                sums[entry.kind] += entry.rho  # type: ignore[assignment]
            granted = [e.rho for e in entries if e.kind == "set"][-1]
            assert granted == quota.granted_rho
            assert sums["spend"] == quota.spent_rho
            assert sums["reserve"] - sums["spend"] - sums["release"] == quota.reserved_rho
            assert quota.reserved_rho >= 0 and quota.spent_rho >= 0
            assert quota.reserved_rho + quota.spent_rho <= quota.granted_rho
        result = budget_service.reconcile(session, dataset_id)
        assert result.consistent, result
        account = result.account
        assert account.spent_rho + account.reserved_rho <= account.total_rho
        return rows


@pytest.mark.parametrize("mode", ["shared", "reserved"])
def test_200_submissions_together_never_pass_a_quota_or_the_cap(tmp_path: Path, mode: str) -> None:
    """PostgreSQL only: 200 threads (50 per key: A and B with their own quota, C1 and C2 sharing a
    group's, D without one) wait at a barrier, then submit ρ = 0.25 each on a dataset of ρ = 10.

    shared (quotas 4, 4, group 4: they add up past 10): first come, first served; D's refusals
    happen only once the dataset is full, so exactly 40 jobs are accepted, each quota ≤ 16.
    reserved (quotas 3, 3, group 2.5 = 8.5 of 10): every quota fills exactly (12, 12, 10) and D
    gets exactly what is left beside them, 1.5 = 6 jobs.
    """
    with services.migrated_settings("postgresql", tmp_path, "quota200") as settings:
        keys = _keys(settings, 5)
        a, b, c1, c2, d = keys.analysts
        dataset_id = _dataset(settings, keys.owner, Decimal(10))
        factory = get_session_factory(settings.sqlalchemy_url)
        grants = (
            (Decimal(4), Decimal(4), Decimal(4))
            if mode == "shared"
            else (Decimal(3), Decimal(3), Decimal("2.5"))
        )
        with transaction(factory) as session:
            quotas.set_policy(session, keys.owner, dataset_id, mode, quota_required=False)
            quotas.set_key_quota(session, keys.owner, dataset_id, a.key_id, grants[0])
            quotas.set_key_quota(session, keys.owner, dataset_id, b.key_id, grants[1])
            quotas.set_group_quota(
                session, keys.owner, dataset_id, "team-c", grants[2], [c1.key_id, c2.key_id]
            )
        callers = [a] * 50 + [b] * 50 + [c1] * 25 + [c2] * 25 + [d] * 50
        barrier = threading.Barrier(len(callers))
        accepted: Counter[str] = Counter()
        refused: Counter[str] = Counter()
        errors: list[BaseException] = []
        lock = threading.Lock()
        label = {a.key_id: "A", b.key_id: "B", c1.key_id: "C", c2.key_id: "C", d.key_id: "D"}

        def submit(principal: Principal) -> None:
            barrier.wait()
            try:
                _submit(settings, principal, dataset_id)
                with lock:
                    accepted[label[principal.key_id]] += 1
            except budget_service.BudgetExceeded as error:
                with lock:
                    refused[f"{label[principal.key_id]}:{error.limit}"] += 1
            except BaseException as error:  # pragma: no cover - reported below
                with lock:
                    errors.append(error)

        threads = [threading.Thread(target=submit, args=(p,)) for p in callers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

        assert errors == []
        assert sum(accepted.values()) + sum(refused.values()) == 200
        assert sum(accepted.values()) == 40, (accepted, refused)
        if mode == "shared":
            assert accepted["A"] <= 16 and accepted["B"] <= 16 and accepted["C"] <= 16
            # D has no quota: only the dataset's cap ever refused it.
            assert set(k for k in refused if k.startswith("D")) <= {"D:dataset"}
        else:
            assert accepted == {"A": 12, "B": 12, "C": 10, "D": 6}, (accepted, refused)
            # Refused by the rest beside the shares, or (once all is taken) by the dataset's cap;
            # never by a quota they do not have.
            by_key = Counter(k.split(":")[0] for k in refused.elements())
            assert by_key == {"A": 38, "B": 38, "C": 40, "D": 44}, refused
            assert {k for k in refused if k.startswith("D")} <= {"D:unallocated", "D:dataset"}
        rows = _quota_reconciles(settings, dataset_id)
        reserved = {
            (q.key_id or q.group_name): q.reserved_rho for q in rows if q.removed_at is None
        }
        assert reserved[a.key_id] == RHO * accepted["A"]
        assert reserved[b.key_id] == RHO * accepted["B"]
        assert reserved["team-c"] == RHO * accepted["C"]
        with transaction(factory) as session:
            account = budget_repository.get_account(session, dataset_id)
        assert account is not None and account.reserved_rho == Decimal(10)


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings), raise_server_exceptions=False) as test_client:
        yield test_client


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _job(client: TestClient, key: str, dataset_id: uuid.UUID, rho: str = "0.25") -> Any:
    return client.post(
        f"/v1/datasets/{dataset_id}/jobs",
        json={"method": "independent", "budget": {"rho": rho}},
        headers=bearer(key),
    )


def test_quota_routes_and_the_409s_name_the_limit(client: TestClient, settings: Settings) -> None:
    keys = _keys(settings, 3)
    owner = bearer(keys.owner_key)
    a, b, c = keys.analyst_keys
    dataset_id = _dataset(settings, keys.owner, Decimal(1))
    a_id = keys.analysts[0].key_id

    # Owner keys only.
    response = client.put(
        f"/v1/datasets/{dataset_id}/quotas/{a_id}", json={"rho": "0.5"}, headers=bearer(a)
    )
    assert response.status_code == 403
    # Quotas limit analyst keys: not an owner key.
    response = client.put(
        f"/v1/datasets/{dataset_id}/quotas/{keys.owner.key_id}", json={"rho": "0.5"}, headers=owner
    )
    assert response.status_code == 422, response.text

    # Past any dataset's budget (and the ledger's columns): refused, not a server error (the
    # API fuzz test's 500 with ρ = 6.5e307).
    for huge in (6.480833617198324e307, "1e18", "9000000.000000000001"):
        response = client.put(
            f"/v1/datasets/{dataset_id}/quotas/{a_id}", json={"rho": huge}, headers=owner
        )
        assert response.status_code == 422, response.text
    response = client.put(
        f"/v1/datasets/{dataset_id}/quotas/{a_id}", json={"rho": "0.5"}, headers=owner
    )
    assert response.status_code == 200, response.text
    assert response.json()["remaining_rho"] == "0.5"

    assert _job(client, a, dataset_id).status_code == 202
    assert _job(client, a, dataset_id).status_code == 202
    refused = _job(client, a, dataset_id)
    assert refused.status_code == 409
    body = refused.json()
    assert body["limit"] == "quota"
    assert body["quota"] == f"the quota of key {a_id}"
    assert body["requested_rho"] == "0.25" and body["remaining_rho"] == "0"
    assert f"over the quota of key {a_id}" in body["detail"]
    assert "the quota has ρ = 0 left" in body["detail"]

    # Listing: reserved, spent, remaining.
    listed = client.get(f"/v1/datasets/{dataset_id}/quotas", headers=owner).json()
    assert listed["policy"] == {
        "mode": "shared",
        "quota_required": False,
        "approval_required": False,
        "quotas_unused_rho": "0",
        "dataset_remaining_rho": "0.5",
    }
    (item,) = listed["items"]
    assert (item["kind"], item["key_id"], item["keys"]) == ("key", str(a_id), [str(a_id)])
    assert (item["granted_rho"], item["reserved_rho"], item["spent_rho"]) == ("0.5", "0.5", "0")

    # Lowering below reserved + spent is refused; the quota is unchanged.
    response = client.put(
        f"/v1/datasets/{dataset_id}/quotas/{a_id}", json={"rho": "0.25"}, headers=owner
    )
    assert response.status_code == 409
    assert "below what the quota has reserved and spent" in response.json()["detail"]

    # A key without a quota is limited by the dataset only; the dataset's 409 is unchanged.
    assert _job(client, b, dataset_id, "0.5").status_code == 202
    refused = _job(client, c, dataset_id)
    assert refused.status_code == 409
    assert refused.json()["limit"] == "dataset"
    assert refused.json()["detail"].startswith("over the dataset's remaining privacy budget")

    # quota_required: a key without a quota is refused, naming what to ask for.
    response = client.put(
        f"/v1/datasets/{dataset_id}/quota-policy",
        json={"mode": "shared", "quota_required": True},
        headers=owner,
    )
    assert response.status_code == 200, response.text
    refused = _job(client, c, dataset_id, "0.001")
    assert refused.status_code == 409
    assert "needs a quota for analyst keys" in refused.json()["detail"]

    # A key in a group cannot also hold its own quota; removal frees it.
    b_id, c_id = keys.analysts[1].key_id, keys.analysts[2].key_id
    response = client.put(
        f"/v1/datasets/{dataset_id}/quota-groups/team",
        json={"rho": "0.1", "keys": [str(b_id), str(a_id)]},
        headers=owner,
    )
    assert response.status_code == 409, response.text
    assert "already has a quota" in response.json()["detail"]
    response = client.put(
        f"/v1/datasets/{dataset_id}/quota-groups/team",
        json={"rho": "0.1", "keys": [str(b_id), str(c_id)]},
        headers=owner,
    )
    assert response.status_code == 200, response.text
    assert response.json()["keys"] == sorted([str(b_id), str(c_id)])
    assert (
        client.delete(f"/v1/datasets/{dataset_id}/quota-groups/team", headers=owner).status_code
        == 204
    )
    assert (
        client.delete(f"/v1/datasets/{dataset_id}/quota-groups/team", headers=owner).status_code
        == 404
    )
    _quota_reconciles(settings, dataset_id)


def test_reserved_policy_refuses_grants_past_what_is_left(
    client: TestClient, settings: Settings
) -> None:
    keys = _keys(settings, 3)
    owner = bearer(keys.owner_key)
    a_id, b_id, _ = (p.key_id for p in keys.analysts)
    dataset_id = _dataset(settings, keys.owner, Decimal(1))
    for key_id, rho in ((a_id, "0.5"), (b_id, "0.75")):
        response = client.put(
            f"/v1/datasets/{dataset_id}/quotas/{key_id}", json={"rho": rho}, headers=owner
        )
        assert response.status_code == 200
    # 1.25 of shares on a dataset of 1: reserved mode is refused until they fit.
    policy = {"mode": "reserved", "quota_required": False}
    response = client.put(f"/v1/datasets/{dataset_id}/quota-policy", json=policy, headers=owner)
    assert response.status_code == 409
    assert "ρ = 1.25, more than the ρ = 1" in response.json()["detail"]
    response = client.put(
        f"/v1/datasets/{dataset_id}/quotas/{b_id}", json={"rho": "0.5"}, headers=owner
    )
    assert response.status_code == 200
    response = client.put(f"/v1/datasets/{dataset_id}/quota-policy", json=policy, headers=owner)
    assert response.status_code == 200, response.text
    # Raising a share past what is left is refused; the unquoted key gets the unallocated rest.
    response = client.put(
        f"/v1/datasets/{dataset_id}/quotas/{a_id}", json={"rho": "0.75"}, headers=owner
    )
    assert response.status_code == 409
    c = keys.analyst_keys[2]
    refused = _job(client, c, dataset_id, "0.25")
    assert refused.status_code == 409
    assert refused.json()["limit"] == "unallocated" and refused.json()["remaining_rho"] == "0"
    _quota_reconciles(settings, dataset_id)


def test_spend_at_claim_and_release_only_for_jobs_that_never_ran(
    client: TestClient, settings: Settings
) -> None:
    keys = _keys(settings, 1)
    (analyst,) = keys.analysts
    dataset_id = _dataset(settings, keys.owner, Decimal(1))
    factory = get_session_factory(settings.sqlalchemy_url)
    with transaction(factory) as session:
        quotas.set_key_quota(session, keys.owner, dataset_id, analyst.key_id, Decimal("0.75"))
    ran = _submit(settings, analyst, dataset_id)
    never_ran = _submit(settings, analyst, dataset_id)
    claim = claim_and_charge(factory, settings, ran)
    assert claim is not None
    # The started job cannot be cancelled back into the quota; the queued one is released.
    for job_id in (ran, never_ran):
        response = client.post(f"/v1/jobs/{job_id}/cancel", headers=bearer(keys.analyst_keys[0]))
        assert response.status_code in (200, 202), response.text
    (quota,) = _quota_reconciles(settings, dataset_id)
    assert (quota.reserved_rho, quota.spent_rho) == (Decimal(0), RHO)
    with transaction(factory) as session:
        kinds = [
            (e.kind, e.job_id)
            for e in budget_repository.quota_entries(session, quota.id)
            if e.job_id is not None
        ]
    assert kinds == [
        ("reserve", ran),
        ("reserve", never_ran),
        ("spend", ran),
        ("release", never_ran),
    ]


def test_quota_rows_and_entries_are_guarded_by_the_database(settings: Settings) -> None:
    keys = _keys(settings, 1)
    (analyst,) = keys.analysts
    dataset_id = _dataset(settings, keys.owner, Decimal(1))
    factory = get_session_factory(settings.sqlalchemy_url)
    with transaction(factory) as session:
        view = quotas.set_key_quota(session, keys.owner, dataset_id, analyst.key_id, Decimal("0.5"))
    statements = [
        "UPDATE budget_quotas SET reserved_rho = granted_rho + 1 WHERE id = :id",
        "UPDATE budget_quotas SET reserved_rho = -1 WHERE id = :id",
        "DELETE FROM budget_quotas WHERE id = :id",
        "UPDATE quota_entries SET rho = 0 WHERE quota_id = :id",
        "DELETE FROM quota_entries WHERE quota_id = :id",
    ]
    quota_id = view.id.hex if settings.sqlalchemy_url.startswith("sqlite") else str(view.id)
    for statement in statements:
        with pytest.raises((IntegrityError, DBAPIError)), transaction(factory) as session:
            session.execute(text(statement), {"id": quota_id})
    with transaction(factory) as session:
        assert len(list(session.scalars(select(QuotaEntry)))) == 1


def test_the_dry_run_shows_the_keys_quota(client: TestClient, settings: Settings) -> None:
    keys = _keys(settings, 1)
    (analyst,) = keys.analyst_keys
    key_id = keys.analysts[0].key_id
    dataset_id = _dataset(settings, keys.owner, Decimal(1))
    client.put(
        f"/v1/datasets/{dataset_id}/quotas/{key_id}",
        json={"rho": "0.25"},
        headers=bearer(keys.owner_key),
    )
    preview = client.post(
        f"/v1/datasets/{dataset_id}/jobs?dry_run=true",
        json={"method": "independent", "budget": {"rho": "0.5"}},
        headers=bearer(analyst),
    )
    assert preview.status_code == 200, preview.text
    body = preview.json()
    assert body["quota"] == f"the quota of key {key_id}"
    assert body["quota_remaining_rho"] == "0.25"
    assert body["would_exceed_budget"] is True and body["remaining_rho"] == "1"
    # The submission agrees.
    assert _job(client, analyst, dataset_id, "0.5").json()["limit"] == "quota"
