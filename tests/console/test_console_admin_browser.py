"""The console's admin pages in headless Chromium (issue 27 §6): an admin signs in, creates an
analyst key (its secret shown once, not on the list), rotates it, revokes it after the
confirmation page; subscribes a webhook and reads its delivery log; reads the audit trail and
downloads it. Every page passes axe-core's WCAG 2.1 A/AA rules; nothing is fetched from another
host. With RHOSYNTH_CONSOLE_SCREENSHOTS set, the pages are saved as console-admin-*.png."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.conftest import Tenant
from tests.console.test_console_browser import _shot, download, watch_requests
from tests.console.test_console_walkthrough import _axe
from tests.support.api import upload
from tests.support.browser import chromium_path
from tests.support.stack import Stack

pytestmark = pytest.mark.browser


def test_an_admin_manages_keys_webhooks_and_the_audit_trail_in_chromium(
    api_stack: Stack, tenant: Tenant, people_csv: bytes, people_schema: str, tmp_path: Path
) -> None:
    from playwright.sync_api import sync_playwright

    chromium = chromium_path()
    base = api_stack.base_url
    own_host = urlsplit(base).netloc
    admin_key = api_stack.create_key(tenant.name, "admin", "browser-admin")
    violations: dict[str, str] = {}
    errors: list[str] = []
    foreign: list[str] = []
    console_errors: list[str] = []

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            watch_requests(context, own_host, foreign, errors)
            page = context.new_page()
            page.on("console", lambda message: console_errors.append(message.text))

            # Sign in from the keyboard: the admin lands on the keys page.
            page.goto(f"{base}/console/login")
            page.focus("#api_key")
            page.keyboard.type(admin_key)
            page.keyboard.press("Enter")
            page.wait_for_url(f"{base}/console/keys")
            assert page.get_by_role("link", name="Datasets").count() == 0
            _axe(page, "keys", violations)

            # A new analyst key: its secret once, on the answer's page.
            page.fill("#key_name", "browser analyst")
            page.select_option("#key_role", "analyst")
            page.click("text=Create key")
            page.wait_for_selector("#secret")
            secret = page.inner_text("#secret").strip()
            assert secret.startswith("rhs_")
            assert "Copy it now" in page.inner_text("main")
            _shot(page, "admin-key-secret")
            _axe(page, "new key's secret", violations)
            with api_stack.client(secret) as client:
                assert client.get("/v1/me").json()["role"] == "analyst"
            page.click("text=Back to the keys")
            page.wait_for_url(f"{base}/console/keys")
            assert secret not in page.content(), "the secret is never shown again"
            row = page.locator("tr", has_text="browser analyst")
            assert "active" in row.inner_text()
            _shot(page, "admin-keys")

            # Rotate it (the old secret stops at once), then revoke the successor.
            row.locator("select").select_option("0")
            row.get_by_role("button", name="Rotate browser analyst").click()
            page.wait_for_selector("#secret")
            rotated = page.inner_text("#secret").strip()
            assert rotated != secret and "rotated" in page.inner_text("h1")
            with api_stack.client(secret) as client:
                assert client.get("/v1/me").status_code == 401
            page.goto(f"{base}/console/keys")
            assert rotated not in page.content()
            rows = page.locator("tr", has_text="browser analyst")
            assert rows.count() == 2  # the retired key and its successor
            successor = rows.filter(has_text="active")
            successor.get_by_role("button", name="Revoke browser analyst").click()
            page.wait_for_selector("#confirm")
            assert "Revoke the key" in page.inner_text("h1")
            _axe(page, "revoke confirmation", violations)
            with api_stack.client(rotated) as client:
                assert client.get("/v1/me").status_code == 200, "asking changes nothing"
            page.click("#confirm")
            page.wait_for_url(f"{base}/console/keys")
            with api_stack.client(rotated) as client:
                assert client.get("/v1/me").status_code == 401
            assert page.locator("tr", has_text="browser analyst").filter(has_text="revoked").count()

            # A webhook subscription, its secret once, and its delivery log.
            page.click("text=Webhooks")
            page.wait_for_url(f"{base}/console/webhooks")
            _axe(page, "webhooks", violations)
            page.fill("#webhook_url", "https://hooks.example.org/rhosynth")
            page.check("text=job.cancelled")
            page.click("text=Create subscription")
            page.wait_for_selector("#secret")
            hook_secret = page.inner_text("#secret").strip()
            _axe(page, "webhook secret", violations)
            page.click("text=The subscription and its delivery log")
            assert "No delivery yet" in page.inner_text("main")
            # An event: a queued job cancelled (no webhook worker here: it stays pending).
            uploaded = upload(tenant.owner, people_csv, people_schema, name="admin-browser")
            job = tenant.analyst.post(
                f"/v1/datasets/{uploaded.json()['id']}/jobs",
                json={"method": "independent", "budget": {"rho": "0.1"}},
            )
            assert tenant.analyst.post(f"/v1/jobs/{job.json()['id']}/cancel").is_success
            page.reload()
            delivery = page.locator("table.deliveries tbody tr")
            assert delivery.count() == 1
            assert "job.cancelled" in delivery.inner_text()
            assert "pending" in delivery.inner_text()
            assert hook_secret not in page.content()
            _shot(page, "admin-webhook")
            _axe(page, "webhook delivery log", violations)
            delivery.get_by_role("button").click()
            page.wait_for_load_state()
            assert page.locator("table.deliveries tbody tr").count() == 1

            # The audit trail: newest first, and its downloads.
            page.click("text=Audit trail")
            page.wait_for_url(f"{base}/console/audit")
            actions = page.locator("table.audit td.action").all_inner_texts()
            # Newest first: the replay just clicked (webhook changes are audited), then the cancel.
            assert actions[:2] == ["webhook.replay", "job.cancel"] and "key.revoke" in actions
            assert "key.rotate" in actions and "key.create" in actions
            _shot(page, "admin-audit")
            _axe(page, "audit trail", violations)
            lines = download(page, "#download_jsonl", tmp_path / "audit.jsonl")
            entries = [json.loads(line) for line in lines.read_text().splitlines()]
            assert [e["seq"] for e in entries] == sorted(e["seq"] for e in entries)
            assert [e["action"] for e in entries[-2:]] == ["job.cancel", "webhook.replay"]
            table = download(page, "#download_csv", tmp_path / "audit.csv")
            rows_csv = list(csv.DictReader(io.StringIO(table.read_text())))
            assert [r["hash"] for r in rows_csv] == [e["hash"] for e in entries]

            # The data pages are not the admin's: the API's 403 (on a page of its own, whose
            # console reports the refused load).
            answer = context.new_page().goto(f"{base}/console/datasets")
            assert answer is not None and answer.status == 403
        finally:
            browser.close()
    assert foreign == []
    assert errors == ["403 " + f"{base}/console/datasets"]
    assert console_errors == []
    assert violations == {}, "\n".join(f"{where}:\n{text}" for where, text in violations.items())
