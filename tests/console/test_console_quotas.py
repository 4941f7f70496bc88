"""The console's quota and approval pages over HTTP (issue 27 §6, over §2–§3): an owner changes
a dataset's quota policy, sets and removes key and group quotas (removal after a confirmation),
and sees the API's refusals beside the form; approves and rejects (with a reason) the jobs
waiting on the approvals queue, each shown with its dry-run cost. Analysts can do none of it
(the API's 403), see their pending job, the decision and its reason, and their quota in the
cost preview. Every action checks the form token."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.conftest import Tenant, make_tenant
from tests.console.support import Console, sign_in
from tests.support.api import upload
from tests.support.stack import Stack


@dataclass
class Analyst:
    console: Console
    api: httpx.Client
    key_id: str


@pytest.fixture
def dataset(tenant: Tenant, people_csv: bytes, people_schema: str) -> dict[str, Any]:
    response = upload(tenant.owner, people_csv, people_schema, name="people-quotas")
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


@pytest.fixture
def owner(api_stack: Stack, tenant: Tenant) -> Iterator[Console]:
    console = sign_in(api_stack, api_stack.create_key(tenant.name, "owner", "quota-owner"))
    yield console
    console.close()


def _analyst(stack: Stack, tenant: Tenant, name: str) -> Analyst:
    secret = stack.create_key(tenant.name, "analyst", name)
    api = stack.client(secret)
    return Analyst(sign_in(stack, secret), api, api.get("/v1/me").json()["key_id"])


@pytest.fixture
def analyst(api_stack: Stack, tenant: Tenant) -> Iterator[Analyst]:
    a = _analyst(api_stack, tenant, "quota-analyst")
    yield a
    a.console.close()
    a.api.close()


def _quotas(tenant: Tenant, dataset_id: str) -> dict[str, Any]:
    response = tenant.owner.get(f"/v1/datasets/{dataset_id}/quotas")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def _text(page: httpx.Response) -> str:
    """The page's words: no tags, whitespace collapsed."""
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", page.text)))


def _approval_on(tenant: Tenant, dataset_id: str) -> None:
    response = tenant.owner.put(
        f"/v1/datasets/{dataset_id}/quota-policy",
        json={"mode": "shared", "quota_required": False, "approval_required": True},
    )
    assert response.status_code == 200, response.text


def _submit(client: httpx.Client, dataset_id: str, rho: str) -> dict[str, Any]:
    response = client.post(
        f"/v1/datasets/{dataset_id}/jobs",
        json={"method": "independent", "budget": {"rho": rho}},
    )
    assert response.status_code == 202, response.text
    body: dict[str, Any] = response.json()
    return body


def test_an_owner_changes_the_policy_and_sets_and_removes_quotas(
    api_stack: Stack, tenant: Tenant, owner: Console, analyst: Analyst, dataset: dict[str, Any]
) -> None:
    base = f"/console/datasets/{dataset['id']}"
    page = owner.http.get(base)
    assert page.status_code == 200
    assert 'id="quotas"' in page.text and "No quotas" in page.text

    policy = owner.post(
        f"{base}/quota-policy",
        {"mode": "shared", "quota_required": "yes", "approval_required": "yes"},
    )
    assert policy.status_code == 303 and policy.headers["location"] == f"{base}#quotas"
    assert _quotas(tenant, dataset["id"])["policy"] | {
        "quotas_unused_rho": None,
        "dataset_remaining_rho": None,
    } == {
        "mode": "shared",
        "quota_required": True,
        "approval_required": True,
        "quotas_unused_rho": None,
        "dataset_remaining_rho": None,
    }

    key_quota = owner.post(f"{base}/quotas", {"key_id": analyst.key_id, "rho": "0.25"})
    assert key_quota.status_code == 303, key_quota.text
    other = _analyst(api_stack, tenant, "quota-member")
    try:
        group = owner.post(
            f"{base}/quota-groups", {"group": "team-a", "rho": "0.5", "keys": other.key_id}
        )
        assert group.status_code == 303, group.text
        items = {q["kind"]: q for q in _quotas(tenant, dataset["id"])["items"]}
        assert items["key"]["key_id"] == analyst.key_id and items["key"]["granted_rho"] == "0.25"
        assert items["group"]["group"] == "team-a" and items["group"]["keys"] == [other.key_id]

        shown = _text(owner.http.get(base))
        assert f"key {analyst.key_id}" in shown and "group team-a" in shown
        assert "ρ = 0.25 (ε = " in shown and "at δ = 1 × 10⁻⁶" in shown
        assert "Now: shared; quota required; approval required." in shown

        # Removing asks first; the confirmation changes nothing.
        ask = owner.post(f"{base}/quota-groups/team-a/delete", {})
        assert ask.status_code == 200 and 'name="confirm" value="yes"' in ask.text
        assert "Remove the quota of the group “team-a”" in html.unescape(ask.text)
        assert len(_quotas(tenant, dataset["id"])["items"]) == 2
        done = owner.post(f"{base}/quota-groups/team-a/delete", {"confirm": "yes"})
        assert done.status_code == 303
        done = owner.post(f"{base}/quotas/{analyst.key_id}/delete", {"confirm": "yes"})
        assert done.status_code == 303
        assert _quotas(tenant, dataset["id"])["items"] == []
    finally:
        other.console.close()
        other.api.close()


def test_the_apis_refusals_are_shown_beside_the_quota_forms(
    api_stack: Stack, tenant: Tenant, owner: Console, analyst: Analyst, dataset: dict[str, Any]
) -> None:
    base = f"/console/datasets/{dataset['id']}"
    # 422: an owner key takes no quota (the API's sentence), and a malformed id or ρ.
    owner_id = tenant.owner.get("/v1/me").json()["key_id"]
    refused = owner.post(f"{base}/quotas", {"key_id": owner_id, "rho": "0.1"})
    assert refused.status_code == 422
    assert 'id="quota_error"' in refused.text and 'href="#key_quota"' in refused.text
    assert "analyst" in _text(refused)
    bad = owner.post(f"{base}/quotas", {"key_id": "not-a-key", "rho": "0.1"})
    assert bad.status_code == 422 and "Key id: give the analyst key's id" in _text(bad)
    assert 'value="not-a-key"' in bad.text, "the form keeps what was typed"
    bad_rho = owner.post(f"{base}/quotas", {"key_id": analyst.key_id, "rho": "lots"})
    assert bad_rho.status_code == 422 and "rho" in _text(bad_rho)
    bad_name = owner.post(
        f"{base}/quota-groups", {"group": "no spaces", "rho": "1", "keys": analyst.key_id}
    )
    assert bad_name.status_code == 422 and "Group name" in _text(bad_name)
    # 409: a key already limited by another quota; and reserved shares past the budget.
    assert owner.post(f"{base}/quotas", {"key_id": analyst.key_id, "rho": "0.1"}).is_redirect
    twice = owner.post(f"{base}/quota-groups", {"group": "g", "rho": "1", "keys": analyst.key_id})
    assert twice.status_code == 409 and 'href="#group_quota"' in twice.text
    huge = owner.post(f"{base}/quotas", {"key_id": analyst.key_id, "rho": "1000"})
    assert huge.is_redirect, "shared quotas may add up past the budget"
    reserved = owner.post(f"{base}/quota-policy", {"mode": "reserved", "approval_required": "yes"})
    assert reserved.status_code == 409
    assert "the dataset's quotas are reserved" in _text(reserved)
    assert 'href="#quota_policy"' in reserved.text
    assert 'id="mode_reserved" name="mode" value="reserved" checked' in reserved.text
    assert 'id="approval_required" name="approval_required" value="yes" checked>' in reserved.text
    policy = _quotas(tenant, dataset["id"])["policy"]
    assert policy["mode"] == "shared" and policy["approval_required"] is False
    # A quota that is not there: the API's 404, on a page of its own.
    missing = owner.post(f"{base}/quota-groups/nobody/delete", {"confirm": "yes"})
    assert missing.status_code == 404


def test_analysts_cannot_change_quotas_or_decide_and_every_form_needs_its_token(
    tenant: Tenant, owner: Console, analyst: Analyst, dataset: dict[str, Any]
) -> None:
    base = f"/console/datasets/{dataset['id']}"
    _approval_on(tenant, dataset["id"])
    job = _submit(analyst.api, dataset["id"], "0.1")
    assert job["status"] == "pending_approval"
    page = analyst.console.http.get(base)
    assert page.status_code == 200 and 'id="quotas"' not in page.text
    assert 'href="/console/approvals"' not in page.text
    assert analyst.console.http.get("/console/approvals").status_code == 403
    attempts = [
        (f"{base}/quota-policy", {"mode": "reserved", "approval_required": "yes"}),
        (f"{base}/quotas", {"key_id": analyst.key_id, "rho": "9"}),
        (f"{base}/quota-groups", {"group": "mine", "rho": "9", "keys": analyst.key_id}),
        (f"{base}/quotas/{analyst.key_id}/delete", {"confirm": "yes"}),
        (f"/console/jobs/{job['id']}/approve", {}),
        (f"/console/jobs/{job['id']}/reject", {"reason": "no"}),
    ]
    for path, data in attempts:
        answer = analyst.console.post(path, data)
        assert answer.status_code == 403, path
        assert "owner" in answer.text
    # Without the form token (or with a wrong one) the owner's forms are refused too.
    for path, data in attempts:
        assert owner.http.post(path, data=data).status_code == 403, path
        assert owner.http.post(path, data={**data, "csrf": "x" * 43}).status_code == 403, path
    assert _quotas(tenant, dataset["id"])["items"] == []
    assert _quotas(tenant, dataset["id"])["policy"]["mode"] == "shared"
    assert tenant.owner.get(f"/v1/jobs/{job['id']}").json()["status"] == "pending_approval"


def test_an_owner_approves_and_rejects_with_a_reason_and_the_analyst_sees_both(
    tenant: Tenant, owner: Console, analyst: Analyst, dataset: dict[str, Any]
) -> None:
    _approval_on(tenant, dataset["id"])
    assert owner.post(
        f"/console/datasets/{dataset['id']}/quotas", {"key_id": analyst.key_id, "rho": "0.5"}
    ).is_redirect
    first = _submit(analyst.api, dataset["id"], "0.1")
    second = _submit(analyst.api, dataset["id"], "0.2")
    assert 'href="/console/approvals"' in owner.http.get("/console/datasets").text

    # The analyst sees the job waiting.
    waiting = _text(analyst.console.http.get(f"/console/jobs/{first['id']}"))
    assert "pending_approval" in waiting and "waiting for an owner" in waiting

    queue = owner.http.get("/console/approvals")
    assert queue.status_code == 200
    shown = _text(queue)
    assert "people-quotas : 2 waiting" in shown
    assert shown.index(first["id"][:8]) < shown.index(second["id"][:8]), "oldest first"
    item = re.search(rf'<article[^>]*id="job-{second["id"]}".*?</article>', queue.text, re.S)
    assert item, queue.text
    card = _text(httpx.Response(200, text=item.group(0)))
    assert "ρ = " in card
    remaining = _quotas(tenant, dataset["id"])["policy"]["dataset_remaining_rho"]
    assert "ρ = 0.2 (ε = " in card and f"ρ = {remaining} (" in card

    # An empty reason: the API's 422, beside that job, the queue unchanged.
    empty = owner.post(f"/console/jobs/{second['id']}/reject", {"reason": "  "})
    assert empty.status_code == 422 and 'id="approval_error"' in empty.text
    assert f'href="#job-{second["id"]}"' in empty.text
    assert tenant.owner.get(f"/v1/jobs/{second['id']}").json()["status"] == "pending_approval"

    rejected = owner.post(
        f"/console/jobs/{second['id']}/reject", {"reason": "Ask for ρ ≤ 0.1 this month"}
    )
    assert rejected.status_code == 303 and rejected.headers["location"] == "/console/approvals"
    approved = owner.post(f"/console/jobs/{first['id']}/approve", {})
    assert approved.status_code == 303
    assert "No job is waiting for approval" in owner.http.get("/console/approvals").text
    # Deciding again: the API's 409, shown on the queue.
    again = owner.post(f"/console/jobs/{first['id']}/approve", {})
    assert again.status_code == 409 and "not waiting for approval" in _text(again)

    seen_rejected = _text(analyst.console.http.get(f"/console/jobs/{second['id']}"))
    assert "rejected" in seen_rejected and "Ask for ρ ≤ 0.1 this month" in seen_rejected
    seen_approved = analyst.console.http.get(f"/console/jobs/{first['id']}").text
    assert 'id="job-decision">approved' in seen_approved
    assert tenant.owner.get(f"/v1/jobs/{first['id']}").json()["status"] in (
        "queued",
        "running",
        "succeeded",
    )
    # The rejected job's reservation went back to the quota.
    quota = _quotas(tenant, dataset["id"])["items"][0]
    assert quota["reserved_rho"] in ("0.1", "0") and quota["remaining_rho"] == "0.4"


def test_an_analyst_sees_their_quota_in_the_cost_preview(
    tenant: Tenant, owner: Console, analyst: Analyst, dataset: dict[str, Any]
) -> None:
    base = f"/console/datasets/{dataset['id']}"
    assert owner.post(f"{base}/quotas", {"key_id": analyst.key_id, "rho": "0.3"}).is_redirect
    preview = analyst.console.post(
        f"{base}/jobs",
        {"method": "independent", "budget_kind": "rho", "rho": "0.1", "action": "preview"},
    )
    assert preview.status_code == 200, preview.text
    shown = _text(preview)
    assert 'id="preview_quota"' in preview.text
    assert "Your quota on this dataset: the quota of key" in shown
    assert "with ρ = 0.3 left (ε = " in shown
    over = analyst.console.post(
        f"{base}/jobs", {"method": "independent", "budget_kind": "rho", "rho": "0.5"}
    )
    assert over.status_code == 409 and "over the quota" in _text(over)


def test_another_tenants_owner_gets_404_for_the_quota_forms_and_the_decisions(
    api_stack: Stack, tenant: Tenant, analyst: Analyst, dataset: dict[str, Any]
) -> None:
    _approval_on(tenant, dataset["id"])
    job = _submit(analyst.api, dataset["id"], "0.1")
    stranger_tenant = make_tenant(api_stack)
    stranger = sign_in(api_stack, api_stack.create_key(stranger_tenant.name, "owner", "other"))
    try:
        base = f"/console/datasets/{dataset['id']}"
        for path, data in (
            (f"{base}/quota-policy", {"mode": "reserved"}),
            (f"{base}/quotas", {"key_id": analyst.key_id, "rho": "1"}),
            (f"{base}/quotas/{analyst.key_id}/delete", {"confirm": "yes"}),
            (f"/console/jobs/{job['id']}/approve", {}),
            (f"/console/jobs/{job['id']}/reject", {"reason": "no"}),
        ):
            answer = stranger.post(path, data)
            assert answer.status_code == 404, path
        queue = stranger.http.get("/console/approvals")
        assert queue.status_code == 200 and job["id"] not in queue.text
    finally:
        stranger.close()
        stranger_tenant.close()
    assert _quotas(tenant, dataset["id"])["items"] == []
    assert tenant.owner.get(f"/v1/jobs/{job['id']}").json()["status"] == "pending_approval"
