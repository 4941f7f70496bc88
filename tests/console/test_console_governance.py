"""The console's admin pages over HTTP (issue 27 §6): admin keys sign in and see only the keys,
webhooks and audit trail; owners and analysts get 403 there; keys are created (secret shown
once), rotated, revoked after a confirmation and given an expiry; webhook subscriptions are
created (secret once), their delivery log read and a delivery replayed; the audit trail is
paged and downloaded through the API's handler. Every action checks the form token."""

from __future__ import annotations

import csv
import html
import io
import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import httpx
import pytest

from app.console.endpoints import epsilon_text
from tests.conftest import Tenant
from tests.console.support import Console, form_fields, sign_in
from tests.support.api import upload
from tests.support.stack import Stack

SECRET = re.compile(r'<code class="secret" id="secret">([^<]+)</code>')
ADMIN_PAGES = ("/console/keys", "/console/webhooks", "/console/audit")


@pytest.fixture
def admin_key(api_stack: Stack, tenant: Tenant) -> str:
    return api_stack.create_key(tenant.name, "admin", "console-admin")


@pytest.fixture
def admin(api_stack: Stack, admin_key: str) -> Iterator[Console]:
    console = sign_in(api_stack, admin_key)
    yield console
    console.close()


@pytest.fixture
def admin_api(api_stack: Stack, admin_key: str) -> Iterator[httpx.Client]:
    client = api_stack.client(admin_key)
    yield client
    client.close()


@pytest.fixture
def dataset(tenant: Tenant, people_csv: bytes, people_schema: str) -> dict[str, Any]:
    response = upload(tenant.owner, people_csv, people_schema, name="people-governance")
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def _secret(page: httpx.Response) -> str:
    found = SECRET.search(page.text)
    assert found, page.text
    return html.unescape(found.group(1))


def _me(stack: Stack, key: str) -> httpx.Response:
    with stack.client(key) as client:
        return client.get("/v1/me")


def _keys(admin_api: httpx.Client) -> dict[str, dict[str, Any]]:
    return {k["name"]: k for k in admin_api.get("/v1/keys").json()["items"]}


def _row(page: str, key_id: str) -> str:
    found = re.search(rf'<tr id="key-{key_id}".*?</tr>', page, re.S)
    assert found, f"no row for key {key_id}"
    return html.unescape(found.group(0))


def test_an_admin_key_signs_in_to_the_admin_pages_only(
    api_stack: Stack, tenant: Tenant, admin: Console, dataset: dict[str, Any]
) -> None:
    assert admin.home == "/console/keys"
    assert admin.http.get("/console").headers["location"] == "/console/keys"
    for path in ADMIN_PAGES:
        page = admin.http.get(path)
        assert page.status_code == 200, (path, page.text)
        assert 'href="/console/keys"' in page.text and 'href="/console/audit"' in page.text
        assert 'href="/console/datasets"' not in page.text
    job = tenant.analyst.post(
        f"/v1/datasets/{dataset['id']}/jobs",
        json={"method": "independent", "budget": {"rho": "0.1"}},
    )
    assert job.status_code == 202, job.text
    # The data pages answer as the API's data routes do for an admin key: 403.
    for path in (
        "/console/datasets",
        f"/console/datasets/{dataset['id']}",
        f"/console/datasets/{dataset['id']}/ledger.png",
        f"/console/jobs/{job.json()['id']}",
        f"/console/jobs/{job.json()['id']}/output",
    ):
        page = admin.http.get(path)
        assert page.status_code == 403, path
        assert "admin keys manage keys only" in page.text
        assert "people-governance" not in page.text
    total = tenant.owner.get(f"/v1/datasets/{dataset['id']}").json()["budget"]["total_rho"]
    grant = admin.post(f"/console/datasets/{dataset['id']}/grant", {"add_rho": "5"})
    assert grant.status_code == 403
    cancel = admin.post(f"/console/jobs/{job.json()['id']}/cancel", {})
    assert cancel.status_code == 403
    assert tenant.owner.get(f"/v1/datasets/{dataset['id']}").json()["budget"]["total_rho"] == total
    assert tenant.owner.get(f"/v1/jobs/{job.json()['id']}").json()["cancel_requested"] is False


def test_owners_and_analysts_get_403_on_the_admin_pages(
    api_stack: Stack, tenant: Tenant, admin_api: httpx.Client
) -> None:
    before = len(admin_api.get("/v1/keys").json()["items"])
    for role in ("owner", "analyst"):
        console = sign_in(api_stack, api_stack.create_key(tenant.name, role, f"c-{role}"))
        try:
            assert console.home == "/console/datasets"
            assert 'href="/console/keys"' not in console.http.get("/console/datasets").text
            for path in (*ADMIN_PAGES, "/console/audit/export?format=csv"):
                page = console.http.get(path)
                assert page.status_code == 403, (role, path)
                assert "this action needs an admin key" in page.text
            created = console.post("/console/keys", {"name": "sneaky", "role": "owner"})
            assert created.status_code == 403
            hook = console.post(
                "/console/webhooks", {"url": "https://example.org/h", "events": "job.failed"}
            )
            assert hook.status_code == 403
        finally:
            console.close()
    assert "sneaky" not in _keys(admin_api)
    assert len(admin_api.get("/v1/keys").json()["items"]) == before + 2
    assert admin_api.get("/v1/webhooks").json()["items"] == []


def test_admin_forms_need_the_form_token_and_the_consoles_origin(
    admin: Console, admin_api: httpx.Client
) -> None:
    before = len(_keys(admin_api))
    no_token = admin.http.post("/console/keys", data={"name": "x", "role": "analyst"})
    assert no_token.status_code == 403
    wrong = admin.http.post("/console/keys", data={"name": "x", "role": "analyst", "csrf": "x"})
    assert wrong.status_code == 403
    cross = admin.http.post(
        "/console/keys",
        data={"name": "x", "role": "analyst", "csrf": admin.token()},
        headers={"Sec-Fetch-Site": "cross-site"},
    )
    assert cross.status_code == 403
    hook = admin.http.post(
        "/console/webhooks", data={"url": "https://example.org/h", "events": "job.failed"}
    )
    assert hook.status_code == 403
    assert len(_keys(admin_api)) == before
    assert admin_api.get("/v1/webhooks").json()["items"] == []


def test_a_new_keys_secret_is_shown_once_and_works(
    api_stack: Stack, admin: Console, admin_api: httpx.Client, dataset: dict[str, Any]
) -> None:
    expires = (datetime.now(UTC) + timedelta(days=30)).replace(second=0, microsecond=0)
    page = admin.post(
        "/console/keys",
        {
            "name": "reporting analyst",
            "role": "analyst",
            "expires_at": expires.strftime("%Y-%m-%dT%H:%M"),
            "datasets": dataset["id"],
        },
    )
    assert page.status_code == 200, page.text
    assert page.headers["cache-control"] == "no-store"
    secret = _secret(page)
    assert "Copy it now: this is the only time it is shown." in page.text
    me = _me(api_stack, secret)
    assert me.status_code == 200 and me.json()["role"] == "analyst"
    key = _keys(admin_api)["reporting analyst"]
    assert key["datasets"] == [dataset["id"]]
    assert datetime.fromisoformat(key["expires_at"]) == expires
    listing = admin.http.get("/console/keys").text
    assert secret not in listing, "the secret is never shown again"
    row = _row(listing, key["id"])
    assert "analyst" in row and f"{key['prefix']}…" in row and dataset["id"] in row
    assert f"{expires:%Y-%m-%d %H:%M} UTC" in row and "active" in row


def test_key_form_errors_are_the_apis_words(
    admin: Console, admin_api: httpx.Client, dataset: dict[str, Any]
) -> None:
    before = len(_keys(admin_api))
    empty = admin.post("/console/keys", {"name": "", "role": "analyst"})
    assert empty.status_code == 422
    assert 'id="error_summary"' in empty.text and "name:" in empty.text
    admin_limited = admin.post(
        "/console/keys", {"name": "limited admin", "role": "admin", "datasets": dataset["id"]}
    )
    assert admin_limited.status_code == 422
    assert "admin keys see no dataset" in admin_limited.text
    # The typed values stay in the form.
    assert form_fields(admin_limited.text, "/console/keys")["name"] == "limited admin"
    bad_id = admin.post("/console/keys", {"name": "n", "role": "analyst", "datasets": "nope"})
    assert bad_id.status_code == 422 and "each entry must be a dataset id" in bad_id.text
    past = admin.post(
        "/console/keys", {"name": "n", "role": "analyst", "expires_at": "2001-01-01T00:00"}
    )
    assert past.status_code == 422 and "must be in the future" in past.text
    bad_date = admin.post(
        "/console/keys", {"name": "n", "role": "analyst", "expires_at": "tomorrow"}
    )
    assert bad_date.status_code == 422 and "Expires: not a date and time" in bad_date.text
    assert len(_keys(admin_api)) == before


def test_rotate_shows_the_new_secret_once_and_the_old_one_stops(
    api_stack: Stack, admin: Console, admin_api: httpx.Client
) -> None:
    created = admin.post("/console/keys", {"name": "to rotate", "role": "analyst"})
    old_secret = _secret(created)
    key = _keys(admin_api)["to rotate"]
    rotated = admin.post(f"/console/keys/{key['id']}/rotate", {"overlap_seconds": "0"})
    assert rotated.status_code == 200, rotated.text
    new_secret = _secret(rotated)
    assert new_secret != old_secret and "rotated" in rotated.text
    assert _me(api_stack, old_secret).status_code == 401
    assert _me(api_stack, new_secret).status_code == 200
    listing = admin.http.get("/console/keys").text
    assert new_secret not in listing
    assert "retired" in _row(listing, key["id"])
    # A retired key offers no rotation; the API's refusal, were it posted, is shown as such.
    assert f"/console/keys/{key['id']}/rotate" not in listing
    again = admin.post(f"/console/keys/{key['id']}/rotate", {"overlap_seconds": "3600"})
    assert again.status_code == 409 and "already been rotated" in again.text
    too_long = admin.post(f"/console/keys/{key['id']}/rotate", {"overlap_seconds": "999999999"})
    assert too_long.status_code == 422


def test_revoke_asks_first_and_keeps_the_last_admin_key(
    api_stack: Stack, admin: Console, admin_api: httpx.Client
) -> None:
    created = admin.post("/console/keys", {"name": "to revoke", "role": "owner"})
    secret = _secret(created)
    key = _keys(admin_api)["to revoke"]
    victim = sign_in(api_stack, secret)
    try:
        ask = admin.post(f"/console/keys/{key['id']}/revoke", {})
        assert ask.status_code == 200
        assert "Revoke the key “to revoke”?" in html.unescape(ask.text)
        confirm = form_fields(ask.text, f"/console/keys/{key['id']}/revoke")
        assert confirm["confirm"] == "yes"
        assert _me(api_stack, secret).status_code == 200, "the first step changes nothing"
        done = admin.http.post(f"/console/keys/{key['id']}/revoke", data=confirm)
        assert done.status_code == 303 and done.headers["location"] == "/console/keys"
        assert _me(api_stack, secret).status_code == 401
        assert victim.http.get("/console/datasets").status_code == 303, "its session ended"
        assert "revoked" in _row(admin.http.get("/console/keys").text, key["id"])
    finally:
        victim.close()
    # The tenant's only admin key: the API's 409, on the keys page.
    me = admin_api.get("/v1/me").json()
    last = admin.post(f"/console/keys/{me['key_id']}/revoke", {"confirm": "yes"})
    assert last.status_code == 409
    assert "last active admin key" in last.text and 'id="error_summary"' in last.text
    assert admin.http.get("/console/keys").status_code == 200
    missing = admin.post("/console/keys/00000000-0000-0000-0000-000000000000/revoke", {})
    assert missing.status_code == 404


def test_expiry_is_set_and_cleared(admin: Console, admin_api: httpx.Client) -> None:
    admin.post("/console/keys", {"name": "expiring", "role": "analyst"})
    key = _keys(admin_api)["expiring"]
    path = f"/console/keys/{key['id']}/expiry"
    when = (datetime.now(UTC) + timedelta(days=2)).replace(second=0, microsecond=0)
    done = admin.post(path, {"action": "set", "expires_at": when.strftime("%Y-%m-%dT%H:%M")})
    assert done.status_code == 303
    assert datetime.fromisoformat(_keys(admin_api)["expiring"]["expires_at"]) == when
    assert f"{when:%Y-%m-%d %H:%M} UTC" in _row(admin.http.get("/console/keys").text, key["id"])
    past = admin.post(path, {"action": "set", "expires_at": "2001-01-01T00:00"})
    assert past.status_code == 422 and "must be in the future" in past.text
    empty = admin.post(path, {"action": "set", "expires_at": ""})
    assert empty.status_code == 422
    cleared = admin.post(path, {"action": "clear"})
    assert cleared.status_code == 303
    assert _keys(admin_api)["expiring"]["expires_at"] is None


def _subscribe(admin: Console, **fields: Any) -> httpx.Response:
    data = {"csrf": admin.token(), "enabled": "yes", **fields}
    return admin.http.post("/console/webhooks", data=data)


def test_a_webhook_is_created_its_deliveries_listed_and_replayed(
    tenant: Tenant, admin: Console, admin_api: httpx.Client, dataset: dict[str, Any]
) -> None:
    created = _subscribe(
        admin,
        url="https://hooks.example.org/rhosynth",
        events=["job.cancelled", "job.failed"],
        description="ops",
    )
    assert created.status_code == 200, created.text
    secret = _secret(created)
    assert "Copy it now" in created.text
    [hook] = admin_api.get("/v1/webhooks").json()["items"]
    assert hook["events"] == ["job.cancelled", "job.failed"] and hook["enabled"] is True
    listing = admin.http.get("/console/webhooks").text
    assert "https://hooks.example.org/rhosynth" in listing and secret not in listing
    page = admin.http.get(f"/console/webhooks/{hook['id']}")
    assert page.status_code == 200 and "No delivery yet" in page.text
    # A cancelled job is an event; with no webhook worker here its delivery stays pending.
    job = tenant.analyst.post(
        f"/v1/datasets/{dataset['id']}/jobs",
        json={"method": "independent", "budget": {"rho": "0.1"}},
    )
    assert tenant.analyst.post(f"/v1/jobs/{job.json()['id']}/cancel").is_success
    [delivery] = admin_api.get(f"/v1/webhooks/{hook['id']}/deliveries").json()["items"]
    page = admin.http.get(f"/console/webhooks/{hook['id']}")
    row = re.search(rf'<tr id="delivery-{delivery["id"]}".*?</tr>', page.text, re.S)
    assert row and "job.cancelled" in row.group(0) and "pending" in row.group(0)
    assert secret not in page.text
    replay_path = f"/console/webhooks/deliveries/{delivery['id']}/replay"
    replay = admin.http.post(replay_path, data=form_fields(page.text, replay_path))
    assert replay.status_code == 303
    assert replay.headers["location"] == f"/console/webhooks/{hook['id']}#delivery-{delivery['id']}"
    [after] = admin_api.get(f"/v1/webhooks/{hook['id']}/deliveries").json()["items"]
    assert after["status"] == "pending" and after["next_attempt_at"] is not None
    # Delete: a confirmation first, then gone.
    ask = admin.post(f"/console/webhooks/{hook['id']}/delete", {})
    assert ask.status_code == 200 and "Delete this webhook subscription?" in ask.text
    assert len(admin_api.get("/v1/webhooks").json()["items"]) == 1
    done = admin.post(f"/console/webhooks/{hook['id']}/delete", {"confirm": "yes"})
    assert done.status_code == 303
    assert admin_api.get("/v1/webhooks").json()["items"] == []


def test_webhook_form_errors_are_the_apis_words(admin: Console, admin_api: httpx.Client) -> None:
    no_events = _subscribe(admin, url="https://hooks.example.org/x")
    assert no_events.status_code == 422 and "events:" in no_events.text
    assert form_fields(no_events.text, "/console/webhooks")["url"] == "https://hooks.example.org/x"
    no_threshold = _subscribe(
        admin, url="https://hooks.example.org/x", events=["budget.below_threshold"]
    )
    assert no_threshold.status_code == 422
    assert "budget_threshold_rho is required" in no_threshold.text
    bad_url = _subscribe(admin, url="ftp://x.example.org/x", events=["job.failed"])
    assert bad_url.status_code == 422 and "url:" in bad_url.text
    assert admin_api.get("/v1/webhooks").json()["items"] == []
    assert admin.http.get(f"/console/webhooks/{'0' * 32}").status_code == 404
    # With its threshold, the subscription is made; the threshold is shown as ε too.
    made = _subscribe(
        admin,
        url="https://hooks.example.org/x",
        events=["budget.below_threshold"],
        budget_threshold_rho="0.5",
    )
    assert made.status_code == 200, made.text
    epsilon = f"ε = {epsilon_text(Decimal('0.5'), Decimal('1e-6'))} at δ = 1 × 10⁻⁶"
    listing = html.unescape(admin.http.get("/console/webhooks").text)
    assert f"(below ρ 0.5, {epsilon})" in listing


def test_the_audit_trail_is_paged_filtered_and_downloaded(
    admin: Console, admin_api: httpx.Client
) -> None:
    admin.post("/console/keys", {"name": "audited", "role": "analyst"})
    key = _keys(admin_api)["audited"]
    # Enough entries for two pages (50 a page).
    for day in range(55):
        when = (datetime.now(UTC) + timedelta(days=day + 1)).isoformat()
        assert admin_api.patch(f"/v1/keys/{key['id']}", json={"expires_at": when}).is_success
    exported = [json.loads(line) for line in admin_api.get("/v1/audit").text.splitlines()]
    page = admin.http.get("/console/audit")
    assert page.status_code == 200
    seqs = [int(s) for s in re.findall(r'<tr data-seq="(\d+)"', page.text)]
    assert seqs == [e["seq"] for e in reversed(exported)][:50], "newest first, 50 a page"
    older = re.search(r'<a href="(/console/audit\?[^"]+)" id="older">', page.text)
    assert older
    second = admin.http.get(html.unescape(older.group(1)))
    rest = [int(s) for s in re.findall(r'<tr data-seq="(\d+)"', second.text)]
    assert rest == [e["seq"] for e in reversed(exported)][50:]
    assert "key.create" in second.text and "Newest entries" in second.text
    # Filters: nothing after tomorrow; a malformed date is named, not echoed.
    tomorrow = (datetime.now(UTC) + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
    none = admin.http.get("/console/audit", params={"since": tomorrow})
    assert none.status_code == 200 and "No entry between these dates" in none.text
    bad = admin.http.get("/console/audit", params={"since": "<b>yesterday</b>"})
    assert bad.status_code == 422 and "Since: not a date and time" in bad.text
    assert "<b>yesterday</b>" not in bad.text
    # Downloads: the API's own export, byte for byte.
    jsonl = admin.http.get("/console/audit/export", params={"format": "jsonl"})
    assert jsonl.status_code == 200
    assert jsonl.headers["content-type"].startswith("application/jsonl")
    assert "attachment" in jsonl.headers["content-disposition"]
    assert jsonl.content == admin_api.get("/v1/audit").content
    as_csv = admin.http.get("/console/audit/export", params={"format": "csv"})
    assert as_csv.headers["content-type"].startswith("text/csv")
    assert as_csv.content == admin_api.get("/v1/audit", params={"format": "csv"}).content
    rows = list(csv.DictReader(io.StringIO(as_csv.text)))
    assert [int(r["seq"]) for r in rows] == [e["seq"] for e in exported]
    since = exported[-1]["at"]
    filtered = admin.http.get("/console/audit/export", params={"since": since})
    assert filtered.content == admin_api.get("/v1/audit", params={"since": since}).content
    assert 'href="/console/audit/export?format=csv"' in page.text


def test_a_release_in_rho_shows_its_epsilon_on_the_job_and_dataset_pages(
    api_stack: Stack, tenant: Tenant, dataset: dict[str, Any]
) -> None:
    """Issue 27 §6: wherever a budget appears, ε beside ρ (a release asked for in ρ showed ρ
    only on the job page and in the jobs table)."""
    job = tenant.analyst.post(
        f"/v1/datasets/{dataset['id']}/jobs",
        json={"method": "independent", "budget": {"rho": "0.1"}},
    )
    assert job.status_code == 202, job.text
    expected = f"ε = {epsilon_text(Decimal('0.1'), Decimal('1e-6'))} at δ = 1 × 10⁻⁶"
    console = sign_in(api_stack, api_stack.create_key(tenant.name, "analyst", "eps"))
    try:
        job_page = html.unescape(console.http.get(f"/console/jobs/{job.json()['id']}").text)
        assert f"(as (ε, δ)-DP: {expected})" in job_page
        dataset_page = html.unescape(console.http.get(f"/console/datasets/{dataset['id']}").text)
        assert f"0.1 ({expected})" in dataset_page
        fields = form_fields(dataset_page, f"/console/datasets/{dataset['id']}/jobs")
        preview = console.http.post(
            f"/console/datasets/{dataset['id']}/jobs",
            data={**fields, "method": "independent", "rho": "0.1", "action": "preview"},
        )
        assert preview.status_code == 200, preview.text
        # Issue 28 §1: what ρ protects ("per row" here: the dataset has no privacy unit).
        assert f"ρ 0.1 ({expected}), per row, of" in html.unescape(preview.text)
    finally:
        console.close()


def test_the_admin_turns_owner_created_keys_on_and_off(
    admin: Console, admin_api: httpx.Client, api_stack: Stack, tenant: Tenant
) -> None:
    page = admin.http.get("/console/keys").text
    assert 'id="owners_create_analyst_keys"' in page
    assert 'id="owners_create_analyst_keys" checked' not in page
    done = admin.post("/console/keys/policy", {"owners_create_analyst_keys": "on"})
    assert done.status_code == 303
    assert admin_api.get("/v1/keys/policy").json() == {"owners_create_analyst_keys": True}
    assert 'id="owners_create_analyst_keys" checked' in admin.http.get("/console/keys").text
    # An owner's console cannot change it.
    owner = sign_in(api_stack, api_stack.create_key(tenant.name, "owner", "c-owner-policy"))
    try:
        assert owner.post("/console/keys/policy", {}).status_code == 403
    finally:
        owner.close()
    assert admin_api.get("/v1/keys/policy").json() == {"owners_create_analyst_keys": True}
    # Unticked: off again.
    assert admin.post("/console/keys/policy", {}).status_code == 303
    assert admin_api.get("/v1/keys/policy").json() == {"owners_create_analyst_keys": False}
