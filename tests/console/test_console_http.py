"""The web console over HTTP: sessions, forgery checks, roles, tenants and security headers."""

from __future__ import annotations

import hashlib
import html
import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from markupsafe import escape
from sqlalchemy import select, update

from app.auth.models import ApiKey
from app.console.domains import FOLD_AFTER
from app.console.models import ConsoleSession
from app.console.schema_form import rows_from_form, schema_from_rows
from app.db.base import utcnow
from app.db.session import get_session_factory
from app.jobs import execution
from tests.conftest import FIXTURES, Tenant, make_tenant
from tests.console.support import (
    SUSPICIOUS_CODES,
    SUSPICIOUS_SCHEMA,
    TOKEN,
    Console,
    form_fields,
    post_login,
    sign_in,
    suspicious_csv,
)
from tests.support.api import upload
from tests.support.stack import Stack


@pytest.fixture
def dataset(tenant: Tenant, people_csv: bytes, people_schema: str) -> dict[str, Any]:
    response = upload(tenant.owner, people_csv, people_schema, name="people-console")
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def _key(stack: Stack, tenant: Tenant, role: str) -> str:
    return stack.create_key(tenant.name, role, f"console-{role}")


@pytest.fixture
def owner(api_stack: Stack, tenant: Tenant) -> Iterator[Console]:
    console = sign_in(api_stack, _key(api_stack, tenant, "owner"))
    yield console
    console.close()


@pytest.fixture
def analyst(api_stack: Stack, tenant: Tenant) -> Iterator[Console]:
    console = sign_in(api_stack, _key(api_stack, tenant, "analyst"))
    yield console
    console.close()


def _total_rho(tenant: Tenant, dataset_id: str) -> str:
    total: str = tenant.owner.get(f"/v1/datasets/{dataset_id}").json()["budget"]["total_rho"]
    return total


def test_sign_in_sets_a_strict_http_only_session_cookie(api_stack: Stack, owner: Console) -> None:
    cookies = owner.sign_in_response.headers.get_list("set-cookie")
    [cookie] = [c for c in cookies if c.startswith("rhosynth_console=")]
    flags = [part.strip().lower() for part in cookie.split(";")]
    assert "httponly" in flags
    assert "samesite=strict" in flags
    assert "path=/console" in flags
    assert "secure" not in flags  # plain http on loopback; https sets it
    token = cookie.split(";")[0].split("=", 1)[1]
    # Only a hash of the token is stored.
    with api_stack.session() as session:
        hashes = set(session.scalars(select(ConsoleSession.token_hash)))
    assert hashlib.sha256(token.encode()).hexdigest() in hashes
    assert token not in hashes
    assert owner.http.get("/console/datasets").status_code == 200


def test_a_wrong_key_is_refused_and_pages_need_a_session(api_stack: Stack) -> None:
    with httpx.Client(base_url=api_stack.base_url, follow_redirects=False) as http:
        refused = post_login(http, "rhs_not-a-key")
        assert refused.status_code == 401
        set_cookies = " ".join(refused.headers.get_list("set-cookie"))
        assert "rhosynth_console=" not in set_cookies, "no session for a wrong key"
        assert "invalid API key" in refused.text
        page = http.get("/console/datasets")
        assert page.status_code == 303
        assert page.headers["location"] == "/console/login"
        http.cookies.set("rhosynth_console", "made-up")
        assert http.get("/console/datasets").status_code == 303


def test_sign_in_needs_the_token_of_a_sign_in_form_this_browser_loaded(
    api_stack: Stack, tenant: Tenant
) -> None:
    """Login CSRF: a page on another site posting the attacker's key into the victim's browser
    (which sends neither Origin nor Sec-Fetch-Site here, as an old browser would) is refused,
    because the form token must match the sign-in cookie that only this site's form sets."""
    key = _key(api_stack, tenant, "owner")
    with httpx.Client(base_url=api_stack.base_url, follow_redirects=False) as victim:
        no_token = victim.post("/console/login", data={"api_key": key})
        assert no_token.status_code == 403
        assert "sign-in form expired" in no_token.text
        # The attacker's own form token (from the attacker's own visit) does not match the
        # victim's cookie.
        with httpx.Client(base_url=api_stack.base_url) as attacker:
            found = TOKEN.search(attacker.get("/console/login").text)
            assert found
        victim.get("/console/login")
        forged = victim.post("/console/login", data={"api_key": key, "csrf": found.group(1)})
        assert forged.status_code == 403
        for response in (no_token, forged):
            assert "rhosynth_console=" not in " ".join(response.headers.get_list("set-cookie"))
        assert victim.get("/console/datasets").status_code == 303, "not signed in"
        # The form the victim's own browser loaded signs in, and its one-time cookie is cleared.
        signed = post_login(victim, key)
        assert signed.status_code == 303
        cleared = [c for c in signed.headers.get_list("set-cookie") if "rhosynth_login=" in c]
        assert cleared and "Max-Age=0" in cleared[0]
        assert victim.get("/console/datasets").status_code == 200


def test_a_body_over_the_limit_is_refused_with_the_console_headers(
    owner: Console, dataset: dict[str, Any]
) -> None:
    """The body-size limit answers 413 before the console sees the request; the console's
    security headers still wrap that answer."""
    response = owner.http.post(
        f"/console/datasets/{dataset['id']}/grant",
        content=b"add_rho=" + b"1" * (4 * 1024 * 1024),
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert response.status_code == 413
    assert "default-src 'self'" in response.headers["content-security-policy"]
    assert response.headers["x-frame-options"] == "DENY"


def test_a_post_without_the_form_token_or_from_another_site_is_refused(
    tenant: Tenant, owner: Console, dataset: dict[str, Any]
) -> None:
    path = f"/console/datasets/{dataset['id']}/grant"
    before = _total_rho(tenant, dataset["id"])
    no_token = owner.http.post(path, data={"add_rho": "1"})
    assert no_token.status_code == 403
    wrong_token = owner.http.post(path, data={"add_rho": "1", "csrf": "x" * 43})
    assert wrong_token.status_code == 403
    token = owner.token()
    cross_origin = owner.http.post(
        path,
        data={"add_rho": "1", "csrf": token},
        headers={"Origin": "http://evil.example"},
    )
    assert cross_origin.status_code == 403
    cross_site = owner.http.post(
        path, data={"add_rho": "1", "csrf": token}, headers={"Sec-Fetch-Site": "cross-site"}
    )
    assert cross_site.status_code == 403
    login_cross_site = owner.http.post(
        "/console/login", data={"api_key": "x"}, headers={"Sec-Fetch-Site": "cross-site"}
    )
    assert login_cross_site.status_code == 403
    assert _total_rho(tenant, dataset["id"]) == before
    # The same form from the console's own origin goes through.
    origin = str(owner.http.base_url).rstrip("/")
    accepted = owner.http.post(
        path,
        data={"add_rho": "1", "csrf": token},
        headers={"Origin": origin, "Sec-Fetch-Site": "same-origin"},
    )
    assert accepted.status_code == 303, accepted.text
    assert float(_total_rho(tenant, dataset["id"])) == float(before) + 1


def test_another_tenants_session_sees_none_of_it(
    api_stack: Stack, tenant: Tenant, dataset: dict[str, Any]
) -> None:
    job = tenant.analyst.post(
        f"/v1/datasets/{dataset['id']}/jobs",
        json={"method": "independent", "budget": {"rho": "0.1"}},
    )
    assert job.status_code == 202, job.text
    job_id = job.json()["id"]
    other = make_tenant(api_stack)
    console = sign_in(api_stack, _key(api_stack, other, "owner"))
    try:
        listing = console.http.get("/console/datasets")
        assert listing.status_code == 200
        assert dataset["id"] not in listing.text and "people-console" not in listing.text
        for path in (
            f"/console/datasets/{dataset['id']}",
            f"/console/jobs/{job_id}",
            f"/console/jobs/{job_id}/output?format=csv",
            f"/console/jobs/{job_id}/report",
        ):
            assert console.http.get(path).status_code == 404, path
        before = _total_rho(tenant, dataset["id"])
        grant = console.post(f"/console/datasets/{dataset['id']}/grant", {"add_rho": "5"})
        assert grant.status_code == 404
        cancel = console.post(f"/console/jobs/{job_id}/cancel", {})
        assert cancel.status_code == 404
        assert _total_rho(tenant, dataset["id"]) == before
        assert tenant.analyst.get(f"/v1/jobs/{job_id}").json()["status"] == "queued"
    finally:
        console.close()
        other.close()


def test_an_analyst_cannot_grant_delete_or_upload(
    tenant: Tenant, analyst: Console, dataset: dict[str, Any], people_csv: bytes
) -> None:
    page = analyst.http.get(f"/console/datasets/{dataset['id']}")
    assert page.status_code == 200
    assert "Grant budget" not in page.text and "Ledger" not in page.text
    assert "Upload a dataset" not in analyst.http.get("/console/datasets").text
    before = _total_rho(tenant, dataset["id"])
    grant = analyst.post(f"/console/datasets/{dataset['id']}/grant", {"add_rho": "5"})
    assert grant.status_code == 403 and "owner key" in grant.text
    delete = analyst.post(f"/console/datasets/{dataset['id']}/delete", {"confirm": "yes"})
    assert delete.status_code == 403
    posted = analyst.http.post(
        "/console/datasets/upload",
        data={"csrf": analyst.token(), "name": "x", "budget_rho": "1", "schema": "{}"},
        files={"file": ("t.csv", people_csv, "text/csv")},
    )
    assert posted.status_code == 403
    assert _total_rho(tenant, dataset["id"]) == before
    assert tenant.owner.get(f"/v1/datasets/{dataset['id']}").json()["deleted_at"] is None
    assert len(tenant.owner.get("/v1/datasets").json()["items"]) == 1


def test_revoking_the_key_ends_the_session(api_stack: Stack, tenant: Tenant) -> None:
    key = _key(api_stack, tenant, "analyst")
    console = sign_in(api_stack, key)
    try:
        assert console.http.get("/console/datasets").status_code == 200
        with api_stack.session() as session:
            session.execute(
                update(ApiKey).where(ApiKey.name == "console-analyst").values(revoked_at=utcnow())
            )
        after = console.http.get("/console/datasets")
        assert after.status_code == 303 and after.headers["location"] == "/console/login"
    finally:
        console.close()


def test_signing_out_ends_the_session(api_stack: Stack, owner: Console) -> None:
    cookie = owner.http.cookies.get("rhosynth_console")
    assert cookie
    out = owner.post("/console/logout", {})
    assert out.status_code == 303 and out.headers["location"] == "/console/login"
    with httpx.Client(base_url=api_stack.base_url, follow_redirects=False) as replay:
        replay.cookies.set("rhosynth_console", cookie)
        assert replay.get("/console/datasets").status_code == 303


def test_every_console_page_sets_the_security_headers(
    api_stack: Stack, tenant: Tenant, owner: Console, dataset: dict[str, Any]
) -> None:
    job = tenant.analyst.post(
        f"/v1/datasets/{dataset['id']}/jobs",
        json={"method": "independent", "budget": {"rho": "0.1"}},
    ).json()
    pages = [
        owner.http.get("/console/login"),
        owner.http.get("/console"),
        owner.http.get("/console/datasets"),
        owner.http.get(f"/console/datasets/{dataset['id']}"),
        owner.http.get(f"/console/datasets/{dataset['id']}?method=aim"),
        owner.http.get(f"/console/jobs/{job['id']}"),
        owner.http.get("/console/jobs/00000000-0000-0000-0000-000000000000"),
        owner.http.get("/console/static/console.css"),
        post_login(owner.http, "wrong"),
    ]
    assert [p.status_code for p in pages] == [200, 303, 200, 200, 200, 200, 404, 200, 401]
    for page in pages:
        csp = page.headers["content-security-policy"]
        assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
        assert page.headers["x-content-type-options"] == "nosniff"
        assert page.headers["referrer-policy"] == "same-origin"
        assert page.headers["cache-control"] == "no-store"
    # No inline script or style anywhere in the pages themselves.
    for page in pages:
        if page.headers.get("content-type", "").startswith("text/html"):
            assert "<script" not in page.text and "style=" not in page.text


def test_the_release_form_previews_submits_and_shows_the_apis_errors(
    tenant: Tenant, analyst: Console, dataset: dict[str, Any]
) -> None:
    path = f"/console/datasets/{dataset['id']}/jobs"
    page = analyst.http.get(f"/console/datasets/{dataset['id']}?method=mst")
    # The generated form: every mst parameter, with its default.
    for name in ("compress", "selection_iterations", "iterations", "synthesis"):
        assert f'name="param.{name}"' in page.text
    assert re.search(r'name="param.iterations" value="2000"', page.text)
    base = {"method": "mst", "budget_kind": "rho", "rho": "0.2", "seed": "7"}
    preview = analyst.post(path, {**base, "action": "preview"})
    assert preview.status_code == 200 and "Cost preview" in preview.text
    assert tenant.analyst.get(f"/v1/datasets/{dataset['id']}/jobs").json()["items"] == []
    bad = analyst.post(path, {**base, "param.iterations": "0", "action": "submit"})
    assert bad.status_code == 422 and "iterations" in bad.text
    not_int = analyst.post(path, {**base, "param.iterations": "many", "action": "submit"})
    assert not_int.status_code == 422 and "iterations: not a valid integer" in not_int.text
    # Issue 26 §1: the error is repeated at the top of the page, with a link to its form.
    top = not_int.text.index('id="error_summary"')
    assert top < not_int.text.index('id="release"') and 'href="#release"' in not_int.text
    over = analyst.post(path, {**base, "rho": "50", "action": "submit"})
    assert over.status_code == 409
    assert "this release needs ρ = 50, the dataset has ρ = " in over.text
    assert "ask an owner of the dataset to add budget" in over.text
    submitted = analyst.post(
        path,
        {**base, "param.iterations": "150", "param.compress": "false", "action": "submit"},
    )
    assert submitted.status_code == 303, submitted.text
    job_id = submitted.headers["location"].rsplit("/", 1)[1]
    job = tenant.analyst.get(f"/v1/jobs/{job_id}").json()
    assert job["method"] == "mst" and job["seed"] == 7
    assert job["params"]["iterations"] == 150 and job["params"]["compress"] is False
    job_page = analyst.http.get(f"/console/jobs/{job_id}")
    assert 'http-equiv="refresh"' in job_page.text and "queued" in job_page.text
    assert 'id="job-queue"' in job_page.text and "number 1 of your team" in job_page.text
    assert re.search(r"as the queue stood at \d\d:\d\d UTC", job_page.text)
    cancelled = analyst.post(f"/console/jobs/{job_id}/cancel", {})
    assert cancelled.status_code == 303
    assert tenant.analyst.get(f"/v1/jobs/{job_id}").json()["status"] == "cancelled"
    # (ε, δ) budgets go through the same conversion as the API.
    eps = analyst.post(
        path,
        {
            "method": "independent",
            "budget_kind": "epsilon_delta",
            "epsilon": "1",
            "delta": "1e-6",
            "action": "submit",
        },
    )
    assert eps.status_code == 303
    eps_job = tenant.analyst.get(f"/v1/jobs/{eps.headers['location'].rsplit('/', 1)[1]}")
    assert eps_job.json()["epsilon"] == "1"


def test_the_release_form_takes_the_budget_that_was_filled_in_and_says_what_is_missing(
    tenant: Tenant, analyst: Console, dataset: dict[str, Any]
) -> None:
    """Issue 26 §2: ε and δ typed without switching the radio button used to answer
    "budget.RhoBudgetIn.rho: Value error, expected a decimal number; budget.EpsilonDeltaBudgetIn.
    epsilon: Field required; ... Extra inputs are not permitted"."""
    path = f"/console/datasets/{dataset['id']}/jobs"
    base = {"method": "independent", "action": "submit"}
    typed = analyst.post(
        path, {**base, "budget_kind": "rho", "rho": "", "epsilon": "1", "delta": "1e-6"}
    )
    assert typed.status_code == 303, typed.text
    job = tenant.analyst.get(f"/v1/jobs/{typed.headers['location'].rsplit('/', 1)[1]}").json()
    assert job["epsilon"] == "1" and job["delta"] == "0.000001"
    for fields, says in (
        ({"budget_kind": "rho", "rho": "", "epsilon": "", "delta": ""}, "ρ: expected a decimal"),
        ({"budget_kind": "epsilon_delta", "epsilon": "1", "delta": ""}, "δ: expected a decimal"),
        ({"budget_kind": "rho", "rho": "", "epsilon": "1"}, "δ: expected a decimal"),
    ):
        refused = analyst.post(path, {**base, **fields})
        assert refused.status_code == 422, refused.text
        assert says in html.unescape(refused.text), fields
        for internal in ("BudgetIn", "Extra inputs", "Value error", "budget."):
            assert internal not in refused.text, (fields, internal)
        field = {"ρ": "rho", "δ": "delta"}[says[0]]
        assert f'<a href="#{field}">' in refused.text, fields


def test_an_owner_uploads_drafts_grants_and_sees_the_ledger(
    tenant: Tenant, owner: Console, people_csv: bytes, people_schema: str
) -> None:
    def post_upload(action: str, schema: str, budget_delta: str = "0") -> httpx.Response:
        return owner.http.post(
            "/console/datasets/upload",
            data={
                "csrf": owner.token(),
                "name": "uploaded-in-console",
                "budget_rho": "2",
                "budget_delta": budget_delta,
                "schema": schema,
                "schema_source": "json",
                "action": action,
            },
            files={"file": ("people.csv", people_csv, "text/csv")},
        )

    draft = post_upload("draft", "")
    assert draft.status_code == 200 and "Drafted from" in draft.text
    assert "&#34;columns&#34;" in draft.text  # the textarea holds the proposed schema
    # Issue 26 §1: the draft discovers city's categories, which needs δ > 0; the form said 0
    # and the upload of the console's own draft was refused. Now δ is filled in, with why.
    delta = re.search(
        r'id="budget_delta" name="budget_delta" inputmode="decimal" value="([^"]*)"', draft.text
    )
    assert delta is not None and delta.group(1) == "0.000001", draft.text
    assert 'id="delta_reason"' in draft.text and "“city”" in html.unescape(draft.text)
    textarea = re.search(
        r'<textarea id="schema" name="schema"[^>]*>(.*?)</textarea>', draft.text, re.S
    )
    assert textarea is not None
    as_drafted = post_upload("upload", html.unescape(textarea.group(1)), delta.group(1))
    assert as_drafted.status_code == 303, as_drafted.text
    no_delta = post_upload("upload", html.unescape(textarea.group(1)))  # δ 0 as typed by hand
    assert no_delta.status_code == 422
    page = html.unescape(no_delta.text)
    assert "give “Total δ” above 0" in page and '<a href="#budget_delta">' in page
    summary = re.search(r'id="error_summary"><p>(.*?)</p>', page, re.S)
    assert summary is not None and "budget_delta" not in summary.group(1)
    assert "--discovery-delta" not in page
    assert page.index('id="error_summary"') < page.index('id="upload"')
    rejected = post_upload("upload", '{"columns": [{"name": "city"}]}')
    assert rejected.status_code == 422 and 'class="error"' in rejected.text
    created = post_upload("upload", people_schema)
    assert created.status_code == 303, created.text
    dataset_id = created.headers["location"].rsplit("/", 1)[1]
    grant = owner.post(
        f"/console/datasets/{dataset_id}/grant",
        {"add_rho": "0.5", "add_delta": "0.000000999999999999"},
    )
    assert grant.status_code == 303, grant.text
    assert float(_total_rho(tenant, dataset_id)) == 2.5
    bad_grant = owner.post(f"/console/datasets/{dataset_id}/grant", {"add_rho": "-1"})
    assert bad_grant.status_code == 422 and "add_rho" in bad_grant.text
    page = owner.http.get(f"/console/datasets/{dataset_id}")
    assert "Ledger" in page.text and page.text.count('<td data-label="Kind">grant</td>') == 2
    # Issue 26 §4: δ exact in scientific notation, and the key's name rather than its id.
    assert '<td data-label="δ">9.99999999999 × 10⁻⁷</td>' in page.text
    assert "0.000000999999999999" not in page.text
    actors = re.findall(
        r'<td data-label="Actor"><span title="key:[0-9a-f-]+">([^<]+)</span>', page.text
    )
    assert actors == ["console-owner", "console-owner"], actors
    gone = owner.post(f"/console/datasets/{dataset_id}/delete", {"confirm": "yes"})
    assert gone.status_code == 303
    assert tenant.owner.get(f"/v1/datasets/{dataset_id}").json()["deleted_at"] is not None


def test_the_dataset_page_shows_warnings_first_and_the_learned_domains(
    tenant: Tenant, owner: Console, analyst: Console
) -> None:
    uploaded = owner.http.post(
        "/console/datasets/upload",
        data={
            "csrf": owner.token(),
            "name": "suspicious-domain",
            "budget_rho": "1",
            "budget_delta": "0.000001",
            "schema": SUSPICIOUS_SCHEMA,
            "action": "upload",
        },
        files={"file": ("table.csv", suspicious_csv(), "text/csv")},
    )
    assert uploaded.status_code == 303, uploaded.text
    location = uploaded.headers["location"]
    dataset_id = location.rsplit("/", 1)[1]
    assert location == f"/console/datasets/{dataset_id}"  # the upload lands on the dataset page
    api = tenant.analyst.get(f"/v1/datasets/{dataset_id}").json()
    assert [(w["code"], w["column"]) for w in api["warnings"]] == SUSPICIOUS_CODES
    columns = {c["name"]: c for c in api["columns"]}

    for console in (owner, analyst):
        page = console.http.get(location).text
        main = page[page.index("<main>") :]
        # The warnings come first: right after the title, before the budget and the columns.
        assert main.index('id="warnings"') < main.index("<h2>Budget</h2>")
        assert re.search(r"<h1>[^<]*</h1>\s*<section class=\"card warnings\" id=\"warnings\"", main)
        assert "2 warnings about this dataset's domain" in main
        for warning in api["warnings"]:
            assert str(escape(warning["message"])) in main
            assert f'data-code="{warning["code"]}"' in main
        # Each learned domain is on the page, marked as learned with DP.
        rows = {
            name: main[main.index(f'<tr data-column="{name}">') :].split("</tr>", 1)[0]
            for name in columns
        }
        for name in ("code", "city", "age", "joined"):
            assert "learned with DP" in rows[name], name
        assert "learned with DP" not in rows["income"] and "declared" in rows["income"]
        assert all(f"<li>{city}</li>" in rows["city"] for city in columns["city"]["categories"])
        assert {"Lyon", "Paris"} <= set(columns["city"]["categories"])
        assert "no category" in rows["code"] and "the bucket <code>Other</code>" in rows["code"]
        ages = columns["age"]["bins"]
        assert all(f"<li>{int(edge)}</li>" in rows["age"] for edge in ages)
        # 16 DP quantile bins (fewer if some merged): a long list is folded, its summary first.
        assert (
            f"<summary>{len(ages) - 1} bins, {len(ages)} edges: 0 … 100</summary>" in (rows["age"])
        ) == (len(ages) > FOLD_AFTER)
        assert "<details>" not in rows["city"]
        joined = columns["joined"]["bins"]
        assert joined[0] == "2010-01-01" and joined[-1] == "2019-12-31"
        assert all(f"<li>{day}</li>" in rows["joined"] for day in joined)  # dates as dates
        assert "<li>1000000000</li>" in rows["income"]

    # The list flags the dataset; a dataset without warnings shows no warning block.
    listing = owner.http.get("/console/datasets").text
    entry = listing[listing.index(f'href="/console/datasets/{dataset_id}"') :].split("</td>")[0]
    assert """<span class="tag" title="see the dataset's page">2 warnings</span>""" in entry
    plain = upload(tenant.owner, (FIXTURES / "people.csv").read_bytes(),
                   (FIXTURES / "people-schema.json").read_text())  # fmt: skip
    assert plain.status_code == 201 and plain.json()["warnings"] == []
    assert 'id="warnings"' not in owner.http.get(f"/console/datasets/{plain.json()['id']}").text


def test_the_drafted_schema_form_uploads_as_drafted_or_as_edited(
    tenant: Tenant, owner: Console, people_csv: bytes
) -> None:
    draft = owner.http.post(
        "/console/datasets/upload",
        data={"csrf": owner.token(), "name": "from-form", "budget_rho": "5", "action": "draft"},
        files={"file": ("people.csv", people_csv, "text/csv")},
    )
    assert draft.status_code == 200, draft.text
    assert "the file is kept" in draft.text and "never learned from the data" in draft.text
    assert 'id="draft_warning">Read from the data without DP' in draft.text
    fields = form_fields(draft.text, "/console/datasets/upload")
    drafted = json.loads(fields["schema"])
    assert fields["schema_source"] == "form" and int(fields["col.count"]) == len(drafted["columns"])
    # Unedited, the form is the draft itself.
    rows = rows_from_form(fields, 1000)
    assert schema_from_rows(rows, fields["schema_extra"]) == drafted
    # Edit one column: its type (to ignore) and another's nullable flag; upload through the form.
    target = next(i for i, c in enumerate(drafted["columns"]) if c["type"] == "categorical")
    fields[f"col.{target}.type"] = "ignore"
    fields["schema"] = "not json: the form is the source"
    uploaded = owner.http.post(
        "/console/datasets/upload",
        data={**fields, "action": "upload"},
        files={"file": ("people.csv", people_csv, "text/csv")},
    )
    assert uploaded.status_code == 303, uploaded.text
    dataset = tenant.owner.get(f"/v1/datasets/{uploaded.headers['location'].rsplit('/', 1)[1]}")
    names = [c["name"] for c in dataset.json()["columns"]]
    assert drafted["columns"][target]["name"] not in names  # ignored columns are not stored
    # A value the form cannot write as JSON is shown next to the form, which keeps the edits.
    fields[f"col.{target}.type"] = "numeric"
    fields[f"col.{target}.min"] = "low"
    bad = owner.http.post(
        "/console/datasets/upload",
        data={**fields, "action": "upload"},
        files={"file": ("people.csv", people_csv, "text/csv")},
    )
    assert bad.status_code == 422 and "min must be a number" in bad.text
    again = form_fields(bad.text, "/console/datasets/upload")
    assert again[f"col.{target}.type"] == "numeric" and again[f"col.{target}.min"] == "low"


def _kept_files(stack: Stack) -> list[str]:
    from app.storage import CONSOLE_DRAFTS, open_storage

    return [stored.key for stored in open_storage(stack.settings).list_objects(CONSOLE_DRAFTS)]


def _draft(console: Console, data: bytes, **extra: str) -> dict[str, str]:
    response = console.http.post(
        "/console/datasets/upload",
        data={"csrf": console.token(), "budget_rho": "5", "action": "draft", **extra},
        files={"file": ("people.csv", data, "text/csv")},
    )
    assert response.status_code == 200, response.text
    return form_fields(response.text, "/console/datasets/upload")


NO_FILE = {"file": ("", b"", "application/octet-stream")}  # a file input left empty


def test_the_file_a_draft_read_is_kept_for_the_upload(
    api_stack: Stack, tenant: Tenant, owner: Console, people_csv: bytes
) -> None:
    """Issue 26 §1: the owner chooses the file once; draft, then upload without choosing it."""
    fields = _draft(owner, people_csv, name="kept-once")
    token = fields["kept_file"]
    assert re.fullmatch(r"[0-9a-f]{32}", token) and fields["kept_name"] == "people.csv"
    key_id = next(k for k in _kept_files(api_stack) if k.endswith(token)).split("/")[1]
    uploaded = owner.http.post(
        "/console/datasets/upload", data={**fields, "action": "upload"}, files=NO_FILE
    )
    assert uploaded.status_code == 303, uploaded.text
    dataset_id = uploaded.headers["location"].rsplit("/", 1)[1]
    stored = tenant.owner.get(f"/v1/datasets/{dataset_id}").json()
    assert stored["name"] == "kept-once"
    assert stored["n_rows"] == len(people_csv.decode().strip().splitlines()) - 1
    assert not any(k.endswith(token) for k in _kept_files(api_stack))  # removed by the upload
    # Used once: the same form again finds no file and says what to do.
    again = owner.http.post(
        "/console/datasets/upload", data={**fields, "action": "upload"}, files=NO_FILE
    )
    assert again.status_code == 422 and "choose the file again" in again.text
    assert form_fields(again.text, "/console/datasets/upload")["kept_file"] == ""

    # A second draft from the kept file (no new file chosen) keeps the same file; a third
    # with a new file replaces it. A key keeps at most three files.
    fields = _draft(owner, people_csv, name="kept-twice")
    redrafted = owner.http.post(
        "/console/datasets/upload", data={**fields, "action": "draft"}, files=NO_FILE
    )
    assert redrafted.status_code == 200, redrafted.text
    assert (
        form_fields(redrafted.text, "/console/datasets/upload")["kept_file"] == fields["kept_file"]
    )
    replaced = _draft(owner, people_csv, kept_file=fields["kept_file"], kept_name="x")
    assert replaced["kept_file"] != fields["kept_file"]
    mine = [k for k in _kept_files(api_stack) if k.split("/")[1] == key_id]
    assert mine == [f"console-drafts/{key_id}/{replaced['kept_file']}"]

    # Another owner key of the same tenant cannot name this key's file (which exists).
    colleague = sign_in(api_stack, _key(api_stack, tenant, "owner"))
    try:
        stolen = colleague.http.post(
            "/console/datasets/upload",
            data={**replaced, "csrf": colleague.token(), "action": "upload"},
            files=NO_FILE,
        )
        assert stolen.status_code == 422 and "choose the file again" in stolen.text
    finally:
        colleague.close()
    assert f"console-drafts/{key_id}/{replaced['kept_file']}" in _kept_files(api_stack)

    # An upload that sends a new file and fails does not fall back to the kept file.
    failed = owner.http.post(
        "/console/datasets/upload",
        data={**replaced, "action": "upload", "budget_rho": "-1"},
        files={"file": ("other.csv", people_csv, "text/csv")},
    )
    assert failed.status_code == 422
    assert form_fields(failed.text, "/console/datasets/upload")["kept_file"] == ""
    assert 'id="file" name="file" type="file" required' in failed.text

    for _ in range(4):
        _draft(owner, people_csv)
    assert len([k for k in _kept_files(api_stack) if k.split("/")[1] == key_id]) == 3
    # Nothing chosen and nothing kept: the form says so in its own words.
    none = owner.http.post(
        "/console/datasets/upload",
        data={"csrf": owner.token(), "budget_rho": "1", "action": "upload"},
        files=NO_FILE,
    )
    assert none.status_code == 422 and "choose the table&#39;s file" in none.text


def test_a_kept_file_expires_after_an_hour_and_the_sweep_removes_it(
    api_stack: Stack, owner: Console, people_csv: bytes
) -> None:
    import os
    import time

    from app.jobs.sweep import sweep_storage
    from app.storage import CONSOLE_DRAFT_TTL_SECONDS

    fields = _draft(owner, people_csv, name="kept-expired")
    [key] = [k for k in _kept_files(api_stack) if k.endswith(fields["kept_file"])]
    path = api_stack.settings.resolved_storage_dir / key
    old = time.time() - CONSOLE_DRAFT_TTL_SECONDS - 5
    os.utime(path, (old, old))
    late = owner.http.post(
        "/console/datasets/upload", data={**fields, "action": "upload"}, files=NO_FILE
    )
    assert late.status_code == 422 and "no longer kept" in late.text
    assert key in sweep_storage(api_stack.settings).removed
    assert key not in _kept_files(api_stack)


def test_the_ledger_plot_is_an_owner_image(
    owner: Console, analyst: Console, dataset: dict[str, Any]
) -> None:
    path = f"/console/datasets/{dataset['id']}/ledger.png"
    page = owner.http.get(f"/console/datasets/{dataset['id']}")
    assert f'src="{path}"' in page.text
    plot = owner.http.get(path)
    assert plot.status_code == 200 and plot.headers["content-type"] == "image/png"
    assert plot.content.startswith(b"\x89PNG\r\n\x1a\n")
    assert "default-src 'self'" in plot.headers["content-security-policy"]
    refused = analyst.http.get(path)
    assert refused.status_code == 403 and b"PNG" not in refused.content
    assert (
        owner.http.get(
            "/console/datasets/00000000-0000-0000-0000-000000000000/ledger.png"
        ).status_code
        == 404
    )


def test_a_succeeded_job_offers_measurements_and_free_samples(
    api_stack: Stack, tenant: Tenant, analyst: Console, dataset: dict[str, Any]
) -> None:
    job_id = tenant.analyst.post(
        f"/v1/datasets/{dataset['id']}/jobs",
        json={"method": "independent", "budget": {"rho": "0.1"}, "seed": 3},
    ).json()["id"]
    # The API stack has no worker: run this job's attempt here, on the same database and
    # storage (claimed by id: the fair claim could pick one of the other tests' queued jobs).
    factory = get_session_factory(api_stack.settings.sqlalchemy_url)
    claim = execution.claim_and_charge(factory, api_stack.settings, uuid.UUID(job_id))
    assert claim is not None
    assert execution._run_attempt(factory, api_stack.settings, claim).status == "succeeded"
    assert tenant.analyst.get(f"/v1/jobs/{job_id}").json()["status"] == "succeeded"
    page = analyst.http.get(f"/console/jobs/{job_id}")
    assert "Draw more rows for free" in page.text
    measured = analyst.http.get(f"/console/jobs/{job_id}/measurements?format=json")
    api = tenant.analyst.get(f"/v1/jobs/{job_id}/measurements", params={"format": "json"})
    assert measured.status_code == 200 and measured.json() == api.json()
    parquet = analyst.http.get(f"/console/jobs/{job_id}/measurements?format=parquet")
    assert parquet.status_code == 200 and parquet.content[:4] == b"PAR1"
    ledger = tenant.owner.get(f"/v1/datasets/{dataset['id']}/ledger").json()
    bad = analyst.post(f"/console/jobs/{job_id}/samples", {"rows": "0"})
    assert bad.status_code == 422 and "rows" in bad.text
    drawn = analyst.post(f"/console/jobs/{job_id}/samples", {"rows": "25", "seed": "11"})
    assert drawn.status_code == 303, drawn.text
    samples = tenant.analyst.get(f"/v1/jobs/{job_id}/samples").json()["items"]
    assert [(s["rows"], s["seed"], s["status"]) for s in samples] == [(25, 11, "queued")]
    assert tenant.owner.get(f"/v1/datasets/{dataset['id']}/ledger").json() == ledger
    listed = analyst.http.get(f"/console/jobs/{job_id}")
    assert samples[0]["id"][:8] in listed.text and "queued" in listed.text
    # Not finished: the download is refused with the API's conflict.
    assert analyst.http.get(f"/console/samples/{samples[0]['id']}/output").status_code == 409


def test_origin_rules_behind_a_tls_proxy() -> None:
    """A browser's Sec-Fetch-Site decides when present (a proxy may change the scheme and Host
    the app sees); without it, Origin must be the public origin."""
    from app.console.service import same_origin

    public = "http://127.0.0.1:8000"
    assert same_origin("https://rhosynth.example", "same-origin", public)
    assert not same_origin("https://rhosynth.example", "cross-site", public)
    assert not same_origin(public, "same-site", public)
    assert same_origin(None, "none", public)
    assert not same_origin("https://rhosynth.example", None, public)
    assert same_origin("https://rhosynth.example", None, "https://rhosynth.example")
    assert not same_origin("null", None, public)
    assert same_origin(None, None, public), "no browser headers: the CSRF token still applies"


def test_signing_in_again_ends_the_previous_session(api_stack: Stack, tenant: Tenant) -> None:
    console = sign_in(api_stack, _key(api_stack, tenant, "owner"))
    first = console.http.cookies.get("rhosynth_console")
    again = post_login(console.http, _key(api_stack, tenant, "owner"))
    assert again.status_code == 303
    second = console.http.cookies.get("rhosynth_console")
    assert first and second and first != second
    stale = httpx.Client(base_url=api_stack.base_url, follow_redirects=False)
    stale.cookies.set("rhosynth_console", first, path="/console")
    assert stale.get("/console/datasets").status_code == 303, "the first session is gone"
    # Signing out of a session that no longer exists clears the cookie instead of refusing.
    out = stale.post("/console/logout", data={})
    assert out.status_code == 303
    stale.close()
    console.http.close()


def test_a_large_tables_draft_warns_that_the_filled_delta_is_not_small(owner: Console) -> None:
    rows = "\n".join(f"{'abc'[i % 3]},{i % 7}" for i in range(20_000))
    drafted = owner.http.post(
        "/console/datasets/upload",
        data={"csrf": owner.token(), "name": "big", "budget_rho": "1", "action": "draft"},
        files={"file": ("big.csv", f"letter,n\n{rows}\n".encode(), "text/csv")},
    )
    assert drafted.status_code == 200, drafted.text
    page = html.unescape(drafted.text)
    assert 'id="delta_reason"' in page and "With 20000 rows" in page, page[-2000:]


def test_budgets_are_shown_as_epsilon_too(
    tenant: Tenant, owner: Console, analyst: Console, dataset: dict[str, Any]
) -> None:
    """Issue 26 §4: beside ρ, the gauges of the dataset list and page state the total and
    remaining budget as ε at δ = 10⁻⁶ (rounded up: still true), and a job asked for in (ε, δ)
    shows them in the jobs table."""
    from decimal import ROUND_CEILING, Decimal

    from app.api.types import format_decimal
    from engine.accounting import epsilon_from_rho_delta

    def expected(rho: str) -> str:
        epsilon = epsilon_from_rho_delta(Decimal(rho), Decimal("1e-6"))
        quantum = Decimal(1).scaleb(epsilon.adjusted() - 3)
        return format_decimal(epsilon.quantize(quantum, rounding=ROUND_CEILING))

    budget = tenant.owner.get(f"/v1/datasets/{dataset['id']}").json()["budget"]
    total = expected(budget["total_rho"])
    listing = owner.http.get("/console/datasets").text
    assert f"ε = {total} in total, {total} remaining, at δ = 1 × 10⁻⁶" in html.unescape(listing)
    job = tenant.analyst.post(
        f"/v1/datasets/{dataset['id']}/jobs",
        json={"method": "independent", "budget": {"epsilon": "0.5", "delta": "1e-7"}},
    )
    assert job.status_code == 202, job.text
    remaining = tenant.owner.get(f"/v1/datasets/{dataset['id']}").json()["budget"]
    page = html.unescape(analyst.http.get(f"/console/datasets/{dataset['id']}").text)
    assert f"{expected(remaining['remaining_rho'])} remaining, at δ = 1 × 10⁻⁶" in page
    assert expected(remaining["remaining_rho"]) != total  # the reservation moved it
    assert "(ε = 0.5, δ = 1 × 10⁻⁷)" in page


def test_an_owner_report_being_built_is_a_page_that_reloads(
    api_stack: Stack, tenant: Tenant, owner: Console, people_csv: bytes, people_schema: str
) -> None:
    """Issue 26 §3: while the owner tier is built after the release, the console answered with
    the API's JSON; it shows a page that says so and reloads itself."""
    from app.reports import names
    from tests.app.test_owner_tier import _claimed, _publish

    _settings, factory, _dataset, job_id, claim = _claimed(
        api_stack, tenant, people_csv, people_schema
    )
    _publish(factory, job_id, claim, [names.RECORD])
    page = owner.http.get(f"/console/jobs/{job_id}/report", params={"tier": "owner"})
    assert page.status_code == 202 and page.headers["Retry-After"] == "5"
    assert page.headers["content-type"].startswith("text/html")
    assert '<meta http-equiv="refresh" content="5">' in page.text
    assert "The owner report is being built" in page.text
    assert f'href="/console/jobs/{job_id}"' in page.text


def test_the_dataset_page_lists_its_rules(tenant: Tenant, analyst: Console) -> None:
    """Issue 28 §2: declared rules are public; the dataset page shows them to an analyst."""
    data = (FIXTURES / "spans.csv").read_bytes()
    schema = (FIXTURES / "spans-schema.json").read_text()
    created = upload(tenant.owner, data, schema)
    assert created.status_code == 201, created.text
    page = analyst.http.get(f"/console/datasets/{created.json()['id']}")
    assert page.status_code == 200
    assert 'id="rules"' in page.text
    assert str(escape("end >= start")) in page.text
    assert str(escape("age >= 16 if wrkstat in ['Full-Time']")) in page.text
    plain = upload(tenant.owner, data, json.dumps({**json.loads(schema), "rules": []}))
    assert 'id="rules"' not in analyst.http.get(f"/console/datasets/{plain.json()['id']}").text
