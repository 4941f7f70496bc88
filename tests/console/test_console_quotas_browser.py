"""The owner's approval flow in headless Chromium (issue 27 §6): an owner turns approval on and
gives an analyst key a quota on the dataset's page; the analyst submits two jobs from the
console, each left waiting; the owner opens the approvals queue, sees each job's cost, rejects
one with a reason and approves the other; the analyst sees both decisions (and the reason) on
the jobs' pages. Every page passes axe-core's WCAG 2.1 A/AA rules; nothing is fetched from
another host. With RHOSYNTH_CONSOLE_SCREENSHOTS set, the pages are saved as console-quota-*.png."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.conftest import Tenant
from tests.console.test_console_browser import _shot, watch_requests
from tests.console.test_console_walkthrough import _axe
from tests.support.api import upload
from tests.support.browser import chromium_path
from tests.support.stack import Stack

pytestmark = pytest.mark.browser

REASON = "Too much for one release: ask for ρ ≤ 0.1"


def _sign_in(page: Any, base: str, key: str) -> None:
    page.goto(f"{base}/console/login")
    page.fill("#api_key", key)
    page.keyboard.press("Enter")
    page.wait_for_url(f"{base}/console/datasets")


def test_an_owner_decides_pending_jobs_and_the_analyst_sees_the_decisions_in_chromium(
    api_stack: Stack, tenant: Tenant, people_csv: bytes, people_schema: str
) -> None:
    from playwright.sync_api import sync_playwright

    chromium = chromium_path()
    base = api_stack.base_url
    own_host = urlsplit(base).netloc
    owner_key = api_stack.create_key(tenant.name, "owner", "browser-owner")
    analyst_key = api_stack.create_key(tenant.name, "analyst", "browser-analyst")
    with api_stack.client(analyst_key) as client:
        analyst_id = client.get("/v1/me").json()["key_id"]
    uploaded = upload(tenant.owner, people_csv, people_schema, name="approvals-browser")
    assert uploaded.status_code == 201, uploaded.text
    dataset = f"{base}/console/datasets/{uploaded.json()['id']}"
    violations: dict[str, str] = {}
    errors: list[str] = []
    foreign: list[str] = []
    console_errors: list[str] = []

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            owner_context = browser.new_context(viewport={"width": 1280, "height": 900})
            analyst_context = browser.new_context(viewport={"width": 1280, "height": 900})
            for context in (owner_context, analyst_context):
                watch_requests(context, own_host, foreign, errors)
            owner = owner_context.new_page()
            analyst = analyst_context.new_page()
            for page in (owner, analyst):
                page.on("console", lambda message: console_errors.append(message.text))

            # The owner turns approval on and gives the analyst key a quota.
            _sign_in(owner, base, owner_key)
            owner.goto(dataset)
            owner.check("#approval_required")
            owner.click("text=Save the policy")
            owner.wait_for_url(f"{dataset}#quotas")
            assert "approval required" in owner.inner_text("#policy_now")
            owner.fill("#quota_key_id", analyst_id)
            owner.fill("#quota_rho", "0.5")
            owner.click("text=Set key quota")
            owner.wait_for_url(f"{dataset}#quotas")
            row = owner.locator("table.quotas tbody tr")
            assert row.count() == 1 and analyst_id in row.inner_text()
            _shot(owner, "quota-dataset")
            _axe(owner, "dataset page with quotas", violations)

            # The analyst previews (their quota shown) and submits two jobs: both wait.
            _sign_in(analyst, base, analyst_key)
            assert analyst.get_by_role("link", name="Approvals", exact=True).count() == 0
            jobs: list[str] = []
            for rho in ("0.1", "0.3"):
                analyst.goto(f"{dataset}?method=independent")
                assert analyst.locator("#quotas").count() == 0
                analyst.fill("#rho", rho)
                analyst.click("button[value=preview]")
                analyst.wait_for_selector("#preview_quota")
                assert "Your quota on this dataset" in analyst.inner_text("#preview_quota")
                analyst.click("button[value=submit]")
                analyst.wait_for_url(f"{base}/console/jobs/*")
                assert analyst.inner_text("#job-status") == "pending_approval"
                assert "waiting for an owner" in analyst.inner_text("#job-approval")
                jobs.append(analyst.url.rsplit("/", 1)[1])
            _axe(analyst, "pending job", violations)
            small, large = jobs

            # The owner opens the queue from the datasets page and sees each job's cost.
            owner.goto(f"{base}/console/datasets")
            owner.click("#approvals_link")
            owner.wait_for_url(f"{base}/console/approvals")
            items = owner.locator("article.pending")
            assert items.count() == 2
            assert items.nth(0).get_attribute("data-job") == small, "oldest first"
            large_item = owner.locator(f"#job-{large}")
            assert "ρ = 0.3" in large_item.locator(".cost").inner_text()
            assert "already reserved" in large_item.locator(".remaining").inner_text()
            _shot(owner, "quota-approvals")
            _axe(owner, "approvals queue", violations)

            # A rejection without a reason is refused beside the job; then with one.
            large_item.get_by_role("button", name=f"Reject job {large[:8]}").click()
            owner.wait_for_selector("#approval_error")
            _axe(owner, "approvals queue with an error", violations)
            owner.fill(f"#reason-{large}", REASON)
            owner.locator(f"#job-{large}").get_by_role("button", name="Reject").click()
            owner.wait_for_url(f"{base}/console/approvals")
            assert owner.locator("article.pending").count() == 1
            owner.get_by_role("button", name=f"Approve job {small[:8]}").click()
            owner.wait_for_url(f"{base}/console/approvals")
            assert owner.locator("#no_pending").count() == 1

            # The analyst sees both decisions.
            analyst.goto(f"{base}/console/jobs/{large}")
            assert analyst.inner_text("#job-status") == "rejected"
            assert analyst.inner_text("#job-decision").startswith("rejected")
            assert analyst.inner_text("#job-reason") == REASON
            _shot(analyst, "quota-rejected")
            _axe(analyst, "rejected job", violations)
            analyst.goto(f"{base}/console/jobs/{small}")
            assert analyst.inner_text("#job-status") in ("queued", "running", "succeeded")
            assert analyst.inner_text("#job-decision").startswith("approved")
            assert analyst.locator("#job-reason").count() == 0
        finally:
            browser.close()
    assert foreign == []
    # The one refused request: the rejection without a reason (the API's 422).
    assert errors == [f"422 {base}/console/jobs/{large}/reject"]
    assert violations == {}, "\n".join(f"{where}:\n{text}" for where, text in violations.items())
    # Chromium reports that refused load in the page's console; nothing else.
    assert [m for m in console_errors if "status of 422" not in m] == []
    assert len(console_errors) == 1
