"""A browser-like client of the console: cookies, form tokens, redirects left visible."""

from __future__ import annotations

import re
from dataclasses import dataclass
from html.parser import HTMLParser

import httpx

from tests.support.stack import Stack

TOKEN = re.compile(r'name="csrf" value="([^"]+)"')


@dataclass
class Console:
    http: httpx.Client
    sign_in_response: httpx.Response

    def token(self, path: str = "/console/datasets") -> str:
        page = self.http.get(path)
        assert page.status_code == 200, page.text
        found = TOKEN.search(page.text)
        assert found, "every signed-in page carries the form token"
        return found.group(1)

    def post(self, path: str, data: dict[str, str], **kwargs: object) -> httpx.Response:
        return self.http.post(path, data={"csrf": self.token(), **data}, **kwargs)  # type: ignore[arg-type]

    def close(self) -> None:
        self.http.close()


def post_login(http: httpx.Client, key: str, **kwargs: object) -> httpx.Response:
    """Submit the sign-in form as a browser does: load it (which sets the sign-in cookie), then
    post the key with the form's token."""
    page = http.get("/console/login")
    assert page.status_code == 200, page.text
    found = TOKEN.search(page.text)
    assert found, "the sign-in form carries a form token"
    return http.post(
        "/console/login",
        data={"api_key": key, "csrf": found.group(1)},
        **kwargs,  # type: ignore[arg-type]
    )


def sign_in(stack: Stack, key: str) -> Console:
    http = httpx.Client(base_url=stack.base_url, timeout=60, follow_redirects=False)
    response = post_login(http, key)
    assert response.status_code == 303, response.text
    return Console(http, response)


class _FormReader(HTMLParser):
    """What a browser would submit from the form posting to ``action`` (no file inputs)."""

    def __init__(self, action: str) -> None:
        super().__init__()
        self.action = action
        self.inside = False
        self.values: dict[str, str] = {}
        self._select: str | None = None
        self._textarea: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.inside = a.get("action") == self.action
        if not self.inside or ("name" not in a and tag in ("input", "select", "textarea")):
            return
        if tag == "input" and a.get("type") not in ("file", "submit"):
            if a.get("type") in ("checkbox", "radio") and "checked" not in a:
                return
            self.values[a["name"]] = a.get("value", "on")
        elif tag == "select":
            self._select = a["name"]
        elif tag == "option" and self._select and "selected" in a:
            self.values[self._select] = a.get("value", "")
        elif tag == "textarea":
            self._textarea = a["name"]
            self.values[a["name"]] = ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self.inside = False
        elif tag == "select":
            self._select = None
        elif tag == "textarea":
            self._textarea = None

    def handle_data(self, data: str) -> None:
        if self._textarea:
            self.values[self._textarea] += data


def form_fields(page: str, action: str) -> dict[str, str]:
    reader = _FormReader(action)
    reader.convert_charrefs = True
    reader.feed(page)
    return reader.values
