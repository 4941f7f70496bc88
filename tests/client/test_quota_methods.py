"""rhosynth.client's quota and approval methods (issue 27 §2, §3) against an httpx MockTransport:
the requests they send and the typed results and errors they return."""

from __future__ import annotations

import json
import uuid
from decimal import Decimal

import httpx
import pytest

from rhosynth import errors
from tests.client.test_retries import DATASET, JOB, Recorder, job_json

KEY = str(uuid.uuid4())


def quota_json() -> dict[str, object]:
    return {
        "id": str(uuid.uuid4()),
        "kind": "key",
        "key_id": KEY,
        "group": None,
        "keys": [KEY],
        "granted_rho": "0.5",
        "reserved_rho": "0.25",
        "spent_rho": "0",
        "remaining_rho": "0.25",
        "available_rho": "0.25",
    }


def test_quota_methods_send_what_the_routes_expect() -> None:
    policy = {
        "mode": "reserved",
        "quota_required": True,
        "approval_required": True,
        "quotas_unused_rho": "0.25",
        "dataset_remaining_rho": "0.75",
    }
    mock = Recorder(
        httpx.Response(200, json=quota_json()),
        httpx.Response(200, json={**quota_json(), "kind": "group", "group": "team"}),
        httpx.Response(200, json=policy),
        httpx.Response(200, json={"policy": policy, "items": [quota_json()]}),
        httpx.Response(204),
    )
    with mock.client() as client:
        quota = client.set_quota(DATASET, KEY, Decimal("0.5"))
        assert quota.remaining_rho == Decimal("0.25")
        assert client.set_group_quota(DATASET, "team", "1", [KEY]).group == "team"
        assert client.set_quota_policy(DATASET, "reserved", quota_required=True).mode == "reserved"
        listed = client.quotas(DATASET)
        assert listed.policy.quotas_unused_rho == Decimal("0.25") and len(listed.items) == 1
        client.delete_quota(DATASET, KEY)
    sent = [(r.method, r.url.path, r.content and json.loads(r.content)) for r in mock.requests]
    assert sent == [
        ("PUT", f"/v1/datasets/{DATASET}/quotas/{KEY}", {"rho": "0.5"}),
        ("PUT", f"/v1/datasets/{DATASET}/quota-groups/team", {"rho": "1", "keys": [KEY]}),
        (
            "PUT",
            f"/v1/datasets/{DATASET}/quota-policy",
            {"mode": "reserved", "quota_required": True, "approval_required": False},
        ),
        ("GET", f"/v1/datasets/{DATASET}/quotas", b""),
        ("DELETE", f"/v1/datasets/{DATASET}/quotas/{KEY}", b""),
    ]


def test_approval_methods() -> None:
    pending = job_json("pending_approval")
    mock = Recorder(
        httpx.Response(200, json={"items": [{"job": pending, "preview": None}]}),
        httpx.Response(200, json=job_json("queued")),
        httpx.Response(200, json={**job_json("rejected"), "decision_reason": "too many columns"}),
    )
    with mock.client() as client:
        (waiting,) = client.approvals(DATASET)
        assert waiting.job.status == "pending_approval" and not waiting.job.finished
        assert client.approve(JOB).status == "queued"
        rejected = client.reject(JOB, "too many columns")
        assert rejected.finished and rejected.decision_reason == "too many columns"
    assert [r.url.path for r in mock.requests] == [
        f"/v1/datasets/{DATASET}/approvals",
        f"/v1/jobs/{JOB}/approve",
        f"/v1/jobs/{JOB}/reject",
    ]
    assert json.loads(mock.requests[2].content) == {"reason": "too many columns"}


def test_over_a_quota_names_it() -> None:
    body = {
        "detail": "over the quota of key x",
        "requested_rho": "0.25",
        "remaining_rho": "0",
        "limit": "quota",
        "quota": f"the quota of key {KEY}",
    }
    mock = Recorder(httpx.Response(409, json=body))
    with mock.client() as client, pytest.raises(errors.OverBudget) as raised:
        client.submit(DATASET, "mst", rho="0.25")
    assert raised.value.limit == "quota" and raised.value.quota == f"the quota of key {KEY}"
