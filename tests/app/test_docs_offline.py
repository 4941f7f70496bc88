"""/docs and /redoc render from the service alone: no request leaves its origin, the pages carry
a Content-Security-Policy of 'self' plus hashed inline blocks, and nothing logs an error."""

from __future__ import annotations

import base64
import hashlib
import re
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from app.api.docs import REDOC_JS, STATIC_URL, SWAGGER_CSS, SWAGGER_JS, content_security_policy
from tests.support.browser import chromium_path
from tests.support.stack import Stack


def _open(url: str, chromium: str, ready: str) -> dict[str, Any]:
    """Opens ``url``; every request to another origin is refused and recorded. ``ready`` is a
    CSS selector that appears once the page has rendered the API."""
    from playwright.sync_api import Route, sync_playwright

    origin = urlsplit(url).netloc
    external: list[str] = []
    errors: list[str] = []

    def route(route: Route) -> None:
        if urlsplit(route.request.url).netloc == origin:
            route.continue_()
        else:
            external.append(route.request.url)
            route.abort()

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.route("**/*", route)
            page.on(
                "console",
                lambda message: errors.append(message.text) if message.type == "error" else None,
            )
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto(url, wait_until="load")
            page.wait_for_selector(ready, timeout=30_000)
            page.wait_for_load_state("networkidle")
            text = page.inner_text("body")
        finally:
            browser.close()
    return {"external": external, "errors": errors, "text": text}


@pytest.mark.browser
def test_swagger_ui_renders_offline(api_stack: Stack) -> None:
    chromium = chromium_path()
    page = _open(f"{api_stack.base_url}/docs", chromium, ready=".opblock-summary-path")
    assert page["external"] == [], "the docs page must not fetch from another host"
    assert page["errors"] == [], page["errors"]
    assert "/v1/datasets" in page["text"]
    assert "rhosynth" in page["text"]


@pytest.mark.browser
def test_redoc_renders_offline(api_stack: Stack) -> None:
    chromium = chromium_path()
    page = _open(f"{api_stack.base_url}/redoc", chromium, ready="h1")
    assert page["external"] == [], "the docs page must not fetch from another host"
    # ReDoc's sidebar footer names its logo on its CDN: the page's CSP refuses it before any
    # request is made (so it is not in "external"), and the page renders without it.
    blocked = [e for e in page["errors"] if "violates the following Content Security" in e]
    assert all("https://cdn.redoc.ly/redoc/logo-mini.svg" in e for e in blocked), blocked
    others = [e for e in page["errors"] if e not in blocked]
    assert others == [], others
    assert "rhosynth" in page["text"]
    assert "/v1/datasets" in page["text"]


def test_docs_assets_are_served_locally(api_stack: Stack) -> None:
    with httpx.Client(base_url=api_stack.base_url) as client:
        for path, kind in (
            (f"{STATIC_URL}/{SWAGGER_JS}", "text/javascript"),
            (f"{STATIC_URL}/{SWAGGER_CSS}", "text/css"),
            (f"{STATIC_URL}/{REDOC_JS}", "text/javascript"),
            (f"{STATIC_URL}/favicon.png", "image/png"),
        ):
            answer = client.get(path)
            assert answer.status_code == 200, path
            assert answer.headers["content-type"].split(";")[0] == kind, path
            assert len(answer.content) > 1000, path
        for page in ("/docs", "/redoc"):
            answer = client.get(page)
            assert answer.status_code == 200
            html = answer.text
            # Every script, stylesheet and icon the page names is on this origin.
            for url in re.findall(r'(?:src|href)="([^"]+)"', html):
                assert url.startswith(STATIC_URL + "/"), url
            policy = answer.headers["content-security-policy"]
            assert policy == content_security_policy(html, inline_styles=page == "/redoc")
            script_src = policy.split("script-src ")[1].split(";")[0]
            assert script_src.startswith("'self'") and "unsafe" not in script_src
            assert "http" not in policy


def _sha256(text: str) -> str:
    return base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()


def test_csp_hashes_exactly_the_inline_blocks() -> None:
    policy = content_security_policy(
        "<script>a()</script><style>b{}</style><script src=x></script>"
    )
    assert f"script-src 'self' 'sha256-{_sha256('a()')}';" in policy
    assert f"style-src 'self' 'sha256-{_sha256('b{}')}';" in policy
    assert policy.count("'sha256-") == 2
    assert "'sha256-" not in content_security_policy("<script src=x></script>")
