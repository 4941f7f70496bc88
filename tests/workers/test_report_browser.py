"""The HTML reports in a real headless browser: every plot renders and nothing is fetched."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Tenant
from tests.support.browser import chromium_path

pytestmark = pytest.mark.browser


def _render(html: str, chromium: str) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    requests: list[str] = []
    errors: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            # Every request the page makes after its own HTML is recorded and refused.
            page.route("**/*", lambda route: (requests.append(route.request.url), route.abort()))
            page.on("console", lambda message: errors.append(message.text))
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.set_content(html, wait_until="load")
            state = page.evaluate(
                """() => ({
                    images: [...document.images].map(i => [i.complete, i.naturalWidth]),
                    svgs: [...document.querySelectorAll('svg')].map(s => {
                        const box = s.getBoundingClientRect();
                        return [box.width, box.height, s.querySelectorAll('*').length];
                    }),
                    headings: [...document.querySelectorAll('h1, h2')].map(h => h.textContent),
                })"""
            )
        finally:
            browser.close()
    return {"requests": requests, "errors": errors, **state}


@pytest.mark.parametrize("tier", ["release", "owner"])
def test_report_renders_offline_in_chromium(
    worker_tenant: Tenant, released: dict[str, Any], tier: str
) -> None:
    chromium = chromium_path()
    job_id = released["job"]["id"]
    html = worker_tenant.owner.get(
        f"/v1/jobs/{job_id}/report", params={"format": "html", "tier": tier}
    )
    assert html.status_code == 200
    page = _render(html.text, chromium)
    assert page["requests"] == [], "a report must not fetch anything"
    assert page["errors"] == []
    plots = page["images"] + page["svgs"]
    assert plots, "the report has plots"
    for complete, width in page["images"]:
        assert complete and width > 0
    for width, height, elements in page["svgs"]:
        assert width > 0 and height > 0 and elements > 3
    assert page["headings"]
