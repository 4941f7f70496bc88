"""The interactive API docs (Swagger UI at /docs, ReDoc at /redoc) served with no network.

FastAPI's default pages load Swagger UI and ReDoc from a CDN and render blank offline. Here the
scripts, the stylesheet and the favicon come from the ``fastapi-offline`` package (a pip
distribution of swagger-ui-dist 5 and redoc 2, MIT; its files are used as static assets only),
mounted under ``/docs-static``, and each page carries a Content-Security-Policy that lets it
load only from this origin: inline ``<script>``/``<style>`` blocks (Swagger UI's init call) are
allowed by their SHA-256 hashes, computed from the page itself. ReDoc's page also allows inline
styles (see ``content_security_policy``).
"""

from __future__ import annotations

import base64
import hashlib
import re

from fastapi import FastAPI, Request
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS_PACKAGE = ("fastapi_offline", "static")
STATIC_URL = "/docs-static"
SWAGGER_JS = "swagger-ui-bundle.js"
SWAGGER_CSS = "swagger-ui.css"
REDOC_JS = "redoc.standalone.js"
FAVICON = "favicon.png"

_INLINE = re.compile(r"<(script|style)>(.*?)</\1>", re.DOTALL)


def _hashes(html: str, tag: str) -> list[str]:
    return [
        "'sha256-{}'".format(
            base64.b64encode(hashlib.sha256(body.encode()).digest()).decode("ascii")
        )
        for kind, body in _INLINE.findall(html)
        if kind == tag
    ]


def content_security_policy(html: str, inline_styles: bool = False) -> str:
    """Only this origin, plus the page's own inline blocks by hash. ``data:`` images are the
    icons inside Swagger UI's stylesheet; ``blob:`` workers are ReDoc's search index.

    ``inline_styles`` is for ReDoc: its bundled styled-components and style-loader insert
    ``<style>`` elements at run time (before ReDoc's ``nonce`` option can reach them), so its
    page needs ``style-src 'unsafe-inline'``; its scripts stay 'self' only."""
    scripts = " ".join(["'self'", *_hashes(html, "script")])
    styles = (
        "'self' 'unsafe-inline'" if inline_styles else " ".join(["'self'", *_hashes(html, "style")])
    )
    return (
        "default-src 'none'; "
        f"script-src {scripts}; "
        f"style-src {styles}; "
        "img-src 'self' data:; "
        "font-src 'self'; "
        "connect-src 'self'; "
        "worker-src 'self' blob:; "
        "base-uri 'none'; "
        "form-action 'none'; "
        "frame-ancestors 'none'"
    )


def _secured(page: HTMLResponse, inline_styles: bool = False) -> HTMLResponse:
    html = bytes(page.body).decode()
    page.headers["Content-Security-Policy"] = content_security_policy(html, inline_styles)
    page.headers["X-Content-Type-Options"] = "nosniff"
    page.headers["Referrer-Policy"] = "no-referrer"
    return page


def install_docs(app: FastAPI, docs_url: str = "/docs", redoc_url: str = "/redoc") -> None:
    """Add the offline docs pages to an app built with ``docs_url=None, redoc_url=None``."""
    assert app.docs_url is None and app.redoc_url is None, "disable FastAPI's CDN pages first"
    openapi_url = app.openapi_url or "/openapi.json"
    oauth2_redirect_url = app.swagger_ui_oauth2_redirect_url
    app.mount(STATIC_URL, StaticFiles(packages=[ASSETS_PACKAGE]), name="docs-static")

    @app.get(docs_url, include_in_schema=False)
    def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return _secured(
            get_swagger_ui_html(
                openapi_url=f"{root}{openapi_url}",
                title=f"{app.title} - Swagger UI",
                oauth2_redirect_url=oauth2_redirect_url,
                swagger_js_url=f"{root}{STATIC_URL}/{SWAGGER_JS}",
                swagger_css_url=f"{root}{STATIC_URL}/{SWAGGER_CSS}",
                swagger_favicon_url=f"{root}{STATIC_URL}/{FAVICON}",
                swagger_ui_parameters=app.swagger_ui_parameters,
            )
        )

    if oauth2_redirect_url:

        @app.get(oauth2_redirect_url, include_in_schema=False)
        def swagger_ui_redirect() -> HTMLResponse:
            return _secured(get_swagger_ui_oauth2_redirect_html())

    @app.get(redoc_url, include_in_schema=False)
    def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return _secured(
            get_redoc_html(
                openapi_url=f"{root}{openapi_url}",
                title=f"{app.title} - ReDoc",
                redoc_js_url=f"{root}{STATIC_URL}/{REDOC_JS}",
                redoc_favicon_url=f"{root}{STATIC_URL}/{FAVICON}",
                with_google_fonts=False,
            ),
            inline_styles=True,
        )
