"""A browser-like client of the console: cookies, form tokens, redirects left visible."""

from __future__ import annotations

import re
from dataclasses import dataclass

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


def sign_in(stack: Stack, key: str) -> Console:
    http = httpx.Client(base_url=stack.base_url, timeout=60, follow_redirects=False)
    response = http.post("/console/login", data={"api_key": key})
    assert response.status_code == 303, response.text
    return Console(http, response)
