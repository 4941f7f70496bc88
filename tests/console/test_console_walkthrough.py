"""The whole owner and analyst flow on a raw table in headless Chromium, as a new user does it
(issue 26): the owner chooses the file once, drafts, uploads without touching a field the draft
filled; the analyst releases with ε and δ, waits, downloads; the owner opens the report on
values. Every page passes axe-core's WCAG 2.1 A/AA rules, and the key steps work from the
keyboard.

With RHOSYNTH_CONSOLE_SCREENSHOTS set to a directory, the steps are saved there as
console-walkthrough-*.png (the README's walkthrough shows them); a normal run writes nothing.
"""

from __future__ import annotations

import csv
import io
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.conftest import FIXTURES, Tenant
from tests.console.test_console_browser import _shot, download, submit_and_wait, watch_requests
from tests.support.browser import chromium_path
from tests.support.stack import Stack

pytestmark = pytest.mark.browser

WCAG = {"runOnly": {"type": "tag", "values": ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]}}
"""axe-core's rules for WCAG 2.0 and 2.1, levels A and AA (labels, names, contrast, landmarks)."""


def _axe(page: Any, where: str, found: dict[str, str]) -> None:
    """Run axe-core (the copy bundled by axe-playwright-python) on the page as it is now."""
    try:
        from axe_playwright_python.sync_playwright import Axe  # type: ignore[import-untyped]
    except ImportError:
        pytest.skip(
            "the accessibility checks need axe-playwright-python (pip install -e '.[test]')"
        )
    results = Axe().run(page, options=WCAG)
    if results.violations_count:
        found[where] = results.generate_report()


def test_owner_and_analyst_walk_through_a_raw_table_in_chromium(
    worker_stack: Stack, worker_tenant: Tenant, tmp_path: Path
) -> None:
    from playwright.sync_api import sync_playwright

    chromium = chromium_path()
    base = worker_stack.base_url
    own_host = urlsplit(base).netloc
    owner_key = worker_stack.create_key(worker_tenant.name, "owner", "walkthrough-owner")
    analyst_key = worker_stack.create_key(worker_tenant.name, "analyst", "walkthrough-analyst")
    table = FIXTURES / "raw-small.csv"
    header = table.read_text().splitlines()[0].split(",")
    violations: dict[str, str] = {}
    errors: list[str] = []
    foreign: list[str] = []

    def watch(context: Any) -> None:
        watch_requests(context, own_host, foreign, errors)

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            owner = browser.new_context(viewport={"width": 1280, "height": 900})
            watch(owner)
            page = owner.new_page()

            # Sign in from the keyboard alone: the key field has focus order, Enter submits.
            page.goto(f"{base}/console/login")
            _axe(page, "sign-in", violations)
            page.keyboard.press("Tab")
            focused = page.evaluate("() => document.activeElement && document.activeElement.id")
            if focused != "api_key":  # a skip link or the brand may come first
                page.focus("#api_key")
            page.keyboard.type(owner_key)
            page.keyboard.press("Enter")
            page.wait_for_url(f"{base}/console/datasets")
            _axe(page, "datasets", violations)

            # The owner fills only what is theirs to decide: the file, a name and ρ.
            page.set_input_files("#file", str(table))
            page.fill("#name", "walkthrough")
            page.fill("#budget_rho", "2")
            page.click("button[value=draft]")
            page.wait_for_selector("#c0_type", state="attached")
            # The draft filled δ (its columns discover categories) and kept the file.
            assert page.input_value("#budget_delta") == "0.000001"
            assert page.locator("#delta_reason").is_visible()
            assert "raw-small.csv" in page.inner_text("#kept_note")
            assert page.get_attribute("#file", "required") is None
            # One line per column, each folded; opened, a column shows its own type's inputs.
            rows = page.locator("details.column-row")
            assert rows.count() == len(header)
            assert not page.locator("#c0_type").is_visible()
            types = {i: page.input_value(f"#c{i}_type") for i in range(len(header))}
            numeric = next(i for i, t in types.items() if t == "numeric")
            categorical = next(i for i, t in types.items() if t == "categorical")
            for index in (numeric, categorical):
                rows.nth(index).locator("summary").focus()
                page.keyboard.press("Enter")  # a folded column opens from the keyboard
                assert page.locator(f"#c{index}_type").is_visible()
            for field in ("min", "max", "quantiles"):
                assert page.locator(f"#c{numeric}_{field}").is_visible(), field
            for field in ("categories", "max_categories", "bins"):
                assert not page.locator(f"#c{numeric}_{field}").is_visible(), field
            assert page.locator(f"#c{categorical}_max_categories").is_visible()
            for field in ("min", "max", "quantiles", "categories", "bins"):
                assert not page.locator(f"#c{categorical}_{field}").is_visible(), field
            height = page.evaluate("() => document.documentElement.scrollHeight")
            _shot(page, "walkthrough-1-draft")
            _axe(page, "draft", violations)
            # Upload as drafted: no field the draft filled is touched, the file is not chosen
            # again.
            page.click("button[value=upload]")
            page.wait_for_url(f"{base}/console/datasets/*")
            dataset_url = page.url
            dataset_id = dataset_url.rsplit("/", 1)[1]
            stored = worker_tenant.owner.get(f"/v1/datasets/{dataset_id}").json()
            assert stored["name"] == "walkthrough" and stored["n_rows"] == 200
            assert page.locator("td.domain").count() > 0  # the learned domains are shown
            _shot(page, "walkthrough-2-dataset")
            _axe(page, "dataset (owner)", violations)

            # The analyst releases with ε and δ (the form takes them without the radio button).
            analyst = browser.new_context(viewport={"width": 1280, "height": 900})
            watch(analyst)
            page = analyst.new_page()
            page.goto(f"{base}/console/login")
            page.fill("#api_key", analyst_key)
            page.click("button[type=submit]")
            page.wait_for_url(f"{base}/console/datasets")
            page.goto(dataset_url)
            page.fill("#epsilon", "1")
            page.fill("#delta", "0.000001")
            page.click("button[value=preview]")
            page.wait_for_selector("#preview")
            _shot(page, "walkthrough-3-release")
            _axe(page, "release form", violations)
            job_url = submit_and_wait(page, base)
            _shot(page, "walkthrough-4-job")
            _axe(page, "job", violations)
            downloaded = download(page, "text=Download CSV", tmp_path / "release.csv")
            released = list(csv.DictReader(io.StringIO(downloaded.read_text())))
            kept = [c["name"] for c in stored["columns"]]
            assert list(released[0]) == kept and len(released) > 0
            assert set(kept) < set(header)  # the identifier column was dropped by the draft

            # The owner opens the report on values (it may still be building: the page says so).
            page = owner.new_page()
            job_id = job_url.rsplit("/", 1)[1]
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                answer = page.goto(f"{base}/console/jobs/{job_id}/report?tier=owner")
                assert answer is not None
                if answer.status == 200:
                    break
                assert answer.status == 202, answer.status
                time.sleep(1)
            assert answer is not None and answer.status == 200
            _shot(page, "walkthrough-5-report")
            _axe(page, "owner report", violations)

            # Switching a column's type shows that type's inputs at once (no round trip).
            page.goto(f"{base}/console/datasets")
            page.set_input_files("#file", str(table))
            page.click("button[value=draft]")
            page.wait_for_selector("#c0_type", state="attached")
            rows = page.locator("details.column-row")
            rows.nth(numeric).locator("summary").click()
            page.select_option(f"#c{numeric}_type", "categorical")
            assert page.locator(f"#c{numeric}_max_categories").is_visible()
            assert not page.locator(f"#c{numeric}_min").is_visible()
            page.check(f"#c{numeric}_declare")
            assert page.locator(f"#c{numeric}_categories").is_visible()
            assert not page.locator(f"#c{numeric}_max_categories").is_visible()
            page.select_option(f"#c{numeric}_type", "codes")
            assert page.locator(f"#c{numeric}_bins").is_visible()
            assert not page.locator(f"#c{numeric}_declare").is_visible()
            page.select_option(f"#c{numeric}_type", "ignore")
            assert not page.locator(f"#c{numeric}_nullable").is_visible()
        finally:
            browser.close()
    assert errors == []
    assert foreign == []
    assert violations == {}, "\n".join(f"{where}:\n{text}" for where, text in violations.items())
    assert height < 4000, f"the drafted form of {len(header)} columns is {height} px long"
