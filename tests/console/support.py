"""A browser-like client of the console: cookies, form tokens, redirects left visible."""

from __future__ import annotations

import csv
import io
import json
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

    @property
    def home(self) -> str:
        """The page sign-in led to: the datasets, or for an admin key the keys."""
        return self.sign_in_response.headers["location"]

    def token(self, path: str | None = None) -> str:
        page = self.http.get(path or self.home)
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


# A table whose domain the upload warns about, for the dataset page's tests: "code" is all
# distinct, so its DP discovery releases no category (each value has probability at most its
# δ = 1e-9 of being released: 2e-6 for the 2,000); "income" declares a last bin 1e8 times wider
# than the others; "age" (16 DP quantile bins: folded on the page), "joined" (DP date quantiles)
# and "city" (two values of 1,000 rows each, surely released) have learned domains to show.
SUSPICIOUS_ROWS = 2_000
SUSPICIOUS_SCHEMA = json.dumps(
    {
        "columns": [
            {"name": "code", "type": "categorical", "other": "Other",
             "categories": {"discover": True, "max": 50, "delta": 1e-9}},
            {"name": "city", "type": "categorical", "other": "Other",
             "categories": {"discover": True, "max": 5}},
            {"name": "age", "type": "numeric", "min": 0, "max": 100, "integer": True,
             "bins": {"quantiles": 16}},
            {"name": "joined", "type": "date", "min": "2010-01-01", "max": "2019-12-31",
             "bins": {"quantiles": 4}},
            {"name": "income", "type": "numeric", "bins": [0, 10, 20, 30, 1000000000]},
        ]
    }
)  # fmt: skip
SUSPICIOUS_CODES = [("all_other", "code"), ("wide_end_bin", "income")]


def suspicious_csv() -> bytes:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["code", "city", "age", "joined", "income"])
    for i in range(SUSPICIOUS_ROWS):
        joined = f"201{i % 10}-{1 + i % 12:02d}-{1 + i % 28:02d}"
        writer.writerow([f"C-{i:05d}", ("Lyon", "Paris")[i % 2], i % 100, joined, i % 30])
    return out.getvalue().encode()
