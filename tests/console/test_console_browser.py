"""The console in a real headless Chromium against a real worker: an owner uploads and grants,
an analyst submits through the generated form, watches the job finish, downloads it and opens
the report; nothing is fetched from another host; a cross-site form post is refused.

With RHOSYNTH_CONSOLE_SCREENSHOTS set to a directory (``RHOSYNTH_CONSOLE_SCREENSHOTS=docs
.venv/bin/python -m pytest tests/console/test_console_browser.py`` refreshes docs/),
the main pages are saved there as console-*.png; a normal test run writes nothing.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.conftest import FIXTURES, Tenant
from tests.support.browser import chromium_path
from tests.support.stack import Stack

pytestmark = pytest.mark.browser

SHOTS = os.environ.get("RHOSYNTH_CONSOLE_SCREENSHOTS")


def _shot(page: Any, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / f"console-{name}.png"), full_page=True)


def submit_and_wait(page: Any, base: str, timeout: float = 240) -> str:
    """Submit the release form, follow the job's page until the job ends, return its URL."""
    page.click("button[value=submit]")
    page.wait_for_url(f"{base}/console/jobs/*")
    job_url: str = page.url
    deadline = time.monotonic() + timeout
    status = ""
    while time.monotonic() < deadline:
        status = page.inner_text("#job-status")
        if status in ("succeeded", "failed", "cancelled"):
            break
        time.sleep(1)
        page.goto(job_url)
    assert status == "succeeded", page.content()
    return job_url


def download(page: Any, link: str, target: Path) -> Path:
    """Click ``link`` (a Playwright selector) and save what it downloads to ``target``."""
    with page.expect_download() as download_info:
        page.click(link)
    download_info.value.save_as(target)
    return target


def watch_requests(
    context: Any,
    own_host: str,
    foreign: list[str],
    errors: list[str],
    allowed_error: str | None = None,
) -> None:
    """Record the browser context's requests to other hosts in ``foreign`` and its own host's
    answers of 400 or more in ``errors`` (except URLs holding ``allowed_error``)."""

    def record(request: Any) -> None:
        if urlsplit(request.url).netloc != own_host:
            foreign.append(request.url)

    def answer(response: Any) -> None:
        if response.status < 400 or urlsplit(response.url).netloc != own_host:
            return
        if allowed_error is None or allowed_error not in response.url:
            errors.append(f"{response.status} {response.url}")

    context.on("request", record)
    context.on("response", answer)


def _sign_in(page: Any, base: str, key: str) -> None:
    page.goto(f"{base}/console")
    page.fill("#api_key", key)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/console/datasets")


def test_owner_to_analyst_release_in_chromium(
    worker_stack: Stack, worker_tenant: Tenant, tmp_path: Path
) -> None:
    from playwright.sync_api import sync_playwright

    chromium = chromium_path()
    base = worker_stack.base_url
    own_host = urlsplit(base).netloc
    owner_key = worker_stack.create_key(worker_tenant.name, "owner", "browser-owner")
    analyst_key = worker_stack.create_key(worker_tenant.name, "analyst", "browser-analyst")
    foreign: list[str] = []
    errors: list[str] = []
    console_errors: list[str] = []

    def watch(context: Any) -> None:
        watch_requests(context, own_host, foreign, errors, allowed_error="/grant")

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            # The owner: upload the fixture with its schema, then grant more budget.
            owner = browser.new_context(viewport={"width": 1280, "height": 900})
            watch(owner)
            page = owner.new_page()
            page.on("console", lambda message: console_errors.append(message.text))
            page.goto(f"{base}/console/login")
            _shot(page, "login")
            _sign_in(page, base, owner_key)
            page.set_input_files("#file", str(FIXTURES / "people.csv"))
            page.fill("#name", "people-in-browser")
            page.fill("#budget_rho", "1")
            # The draft comes back as a column form with the public/budget warning.
            page.click("button[value=draft]")
            page.wait_for_selector("#c0_type", state="attached")
            assert "never learned from the data" in page.inner_text("#domain_help")
            assert page.locator(".column-row").count() == 4
            _shot(page, "upload-draft")
            # The advanced alternative: the file chosen again and the JSON schema.
            page.set_input_files("#file", str(FIXTURES / "people.csv"))
            page.check("#source_json")
            page.click("#schema_json summary")
            page.fill("#schema", (FIXTURES / "people-schema.json").read_text())
            page.click("button[value=upload]")
            page.wait_for_url(f"{base}/console/datasets/*")
            dataset_url = page.url
            page.fill("#add_rho", "0.5")
            page.click("text=Grant budget")
            page.wait_for_load_state()
            assert "1.5" in page.inner_text(".gauge")
            assert page.locator("table.list td", has_text="grant").count() == 2
            # The ledger timeline is an image from the console's own origin, and it loaded.
            assert page.evaluate("() => document.querySelector('img.plot').naturalWidth") > 0
            _shot(page, "dataset-owner")
            page.goto(f"{base}/console/datasets")
            _shot(page, "datasets")

            # The analyst, in a browser context of their own.
            analyst = browser.new_context(viewport={"width": 1280, "height": 900})
            watch(analyst)
            page = analyst.new_page()
            page.on("console", lambda message: console_errors.append(message.text))
            _sign_in(page, base, analyst_key)
            assert "people-in-browser" in page.content()
            page.goto(f"{dataset_url}?method=mst")
            assert page.locator("text=Ledger").count() == 0
            page.fill("#rho", "0.3")
            page.fill("#seed", "11")
            page.fill("#p_iterations", "200")
            page.click("button[value=preview]")
            page.wait_for_selector("#preview")
            _shot(page, "release-form")
            job_url = submit_and_wait(page, base)
            _shot(page, "job")
            downloaded = download(page, "text=Download CSV", tmp_path / "release.csv")
            lines = downloaded.read_text().splitlines()
            assert lines[0].replace('"', "") == "city,age,tier,income"
            assert len(lines) > 1
            page.click("#report-link")
            page.wait_for_load_state()
            assert page.locator("h1, h2").count() > 0
            assert "/report?tier=release" in page.url
            _shot(page, "report")

            # More rows for free from the same release, then their download.
            page.goto(job_url)
            page.fill("#sample_rows", "30")
            page.fill("#sample_seed", "5")
            page.click("text=Draw rows")
            page.wait_for_url(f"{job_url}#samples")
            sample_csv = "a[href*='/console/samples/'][href$='format=csv']"
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and page.locator(sample_csv).count() == 0:
                time.sleep(1)
                page.goto(job_url)
            sample_file = download(page, sample_csv, tmp_path / "sample.csv")
            assert len(sample_file.read_text().splitlines()) == 31

            # Phone width: the dataset page still lays out (no horizontal overflow).
            phone = browser.new_context(viewport={"width": 390, "height": 844})
            watch(phone)
            small = phone.new_page()
            _sign_in(small, base, analyst_key)
            small.goto(dataset_url)
            overflow = small.evaluate(
                "() => document.documentElement.scrollWidth - window.innerWidth"
            )
            assert overflow <= 1
            _shot(small, "phone")

            # A form on another site posting to the console: the SameSite=Strict cookie is not
            # sent, so the console refuses it and the budget is unchanged.
            evil_html = (
                f'<form method="post" action="{dataset_url}/grant">'
                '<input name="add_rho" value="100"><button id="go">go</button></form>'
            )
            attacker = owner.new_page()
            attacker.route(
                "http://evil.example/**",
                lambda route: route.fulfill(status=200, content_type="text/html", body=evil_html),
            )
            attacker.goto("http://evil.example/")
            with attacker.expect_navigation():
                attacker.click("#go")
            assert "Error 403" in attacker.content()
            budget = worker_tenant.owner.get(f"/v1/datasets/{dataset_url.rsplit('/', 1)[1]}")
            assert budget.json()["budget"]["total_rho"] in ("1.5", "1.50")
        finally:
            browser.close()
    assert [url for url in foreign if not url.startswith("http://evil.example/")] == []
    assert errors == []
    assert console_errors == []


def test_an_upload_lands_on_its_warnings_and_learned_domains_in_chromium(
    api_stack: Stack, tenant: Tenant, tmp_path: Path
) -> None:
    """An owner uploads a table whose domain is suspicious: the dataset page opens with the
    warnings at its top, above the fold, and shows every learned edge and category."""
    from playwright.sync_api import sync_playwright

    from tests.console.support import SUSPICIOUS_CODES, SUSPICIOUS_SCHEMA, suspicious_csv

    chromium = chromium_path()
    base = api_stack.base_url
    own_host = urlsplit(base).netloc
    owner_key = api_stack.create_key(tenant.name, "owner", "browser-warned-owner")
    table = tmp_path / "suspicious.csv"
    table.write_bytes(suspicious_csv())
    foreign: list[str] = []
    console_errors: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            context.on(
                "request",
                lambda r: foreign.append(r.url) if urlsplit(r.url).netloc != own_host else None,
            )
            page = context.new_page()
            page.on("console", lambda message: console_errors.append(message.text))
            _sign_in(page, base, owner_key)
            page.set_input_files("#file", str(table))
            page.fill("#name", "suspicious-in-browser")
            page.fill("#budget_rho", "1")
            page.fill("#budget_delta", "0.000001")
            page.fill("#schema", SUSPICIOUS_SCHEMA)
            page.click("button[value=upload]")
            page.wait_for_url(f"{base}/console/datasets/*")
            dataset_id = page.url.rsplit("/", 1)[1]
            api = tenant.analyst.get(f"/v1/datasets/{dataset_id}").json()
            assert [(w["code"], w["column"]) for w in api["warnings"]] == SUSPICIOUS_CODES

            # At the top: the first thing after the title, visible without scrolling, styled.
            first = page.evaluate(
                "() => { const h = document.querySelector('main h1');"
                " return h.nextElementSibling && h.nextElementSibling.id; }"
            )
            assert first == "warnings"
            warnings = page.locator("#warnings")
            assert warnings.is_visible()
            box = warnings.bounding_box()
            budget = page.get_by_role("heading", name="Budget", exact=True).bounding_box()
            assert box is not None and budget is not None
            assert box["y"] + box["height"] <= 900 and box["y"] < budget["y"]
            border = page.evaluate(
                "() => getComputedStyle(document.querySelector('#warnings')).borderTopColor"
            )
            assert border == "rgb(179, 38, 30)"  # the console's error colour
            shown = warnings.inner_text()
            for warning in api["warnings"]:
                assert warning["message"] in shown
            assert page.locator("#warnings li").count() == len(api["warnings"])

            # The learned domains, marked as learned with DP.
            columns = {c["name"]: c for c in api["columns"]}
            for name in ("code", "city", "age", "joined"):
                row = page.locator(f"tr[data-column='{name}']")
                assert "learned with DP" in row.inner_text(), name
            city = page.locator("tr[data-column='city'] td.domain").inner_text()
            assert all(category in city for category in columns["city"]["categories"])
            assert "no category" in page.locator("tr[data-column='code'] td.domain").inner_text()
            joined = page.locator("tr[data-column='joined'] td.domain").inner_text()
            assert all(day in joined for day in columns["joined"]["bins"])
            ages = page.locator("tr[data-column='age'] td.domain")
            edges = [str(int(edge)) for edge in columns["age"]["bins"]]
            if ages.locator("details").count():  # folded: the summary, then every edge
                assert not ages.locator("ol").is_visible()
                ages.locator("summary").click()
            assert ages.locator("ol").is_visible()
            assert ages.locator("li").all_inner_texts() == edges
            _shot(page, "dataset-warnings")

            # Phone width: still no horizontal overflow with the edges listed.
            phone = browser.new_context(viewport={"width": 390, "height": 844})
            small = phone.new_page()
            _sign_in(small, base, owner_key)
            small.goto(f"{base}/console/datasets/{dataset_id}")
            assert small.locator("#warnings").is_visible()
            overflow = small.evaluate(
                "() => document.documentElement.scrollWidth - window.innerWidth"
            )
            assert overflow <= 1
        finally:
            browser.close()
    assert foreign == []
    assert console_errors == []
