"""Refuse JSON bodies that text cannot hold: a lone UTF-16 surrogate (issue 24 §11).

Python's JSON parser accepts ``"\\ud800"`` (an escaped high surrogate without its low half) and
gives a ``str`` that cannot be encoded as UTF-8, so whatever later writes it (a validation error
echoing the input, the database, a log line) failed with a 500. This middleware answers 422
before the route runs. It reads only bodies declared as JSON that contain a ``\\ud`` escape at
all (a byte search), and those within the body limit that BodySizeLimitMiddleware, outside it,
already enforces; anything it cannot parse is left to the route's own validation.
"""

from __future__ import annotations

import json
import re

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
DETAIL = (
    "the JSON body holds a lone UTF-16 surrogate (an escape in \\ud800-\\udfff without its "
    "pair), which text cannot hold"
)


def holds_lone_surrogate(body: bytes) -> bool:
    """Whether ``body``, parsed as JSON, has a string (or key) with a lone surrogate. False when
    it has no surrogate escape or does not parse (the route's validation answers that)."""
    if not _SURROGATE_ESCAPE.search(body):
        return False
    try:
        parsed = json.loads(body)
        json.dumps(parsed, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    except (ValueError, RecursionError):
        return False
    return False


def _is_json(scope: Scope) -> bool:
    for name, value in scope.get("headers", []):
        if name == b"content-type":
            media = value.split(b";", 1)[0].strip().lower()
            return bool(media == b"application/json" or media.endswith(b"+json"))
    return False


class StrictJSONMiddleware:
    """Answer 422 to a JSON body with a lone surrogate; pass every other request through."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _is_json(scope):
            await self.app(scope, receive, send)
            return
        # The body is bounded by BodySizeLimitMiddleware (outside this one), which raises while
        # it is read if it passes its cap.
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client left
                await self.app(scope, _replay([message]), send)
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        if holds_lone_surrogate(body):
            await JSONResponse({"detail": DETAIL}, status_code=422)(scope, receive, send)
            return
        await self.app(scope, _replay([{"type": "http.request", "body": body}], receive), send)


def _replay(messages: list[Message], then: Receive | None = None) -> Receive:
    pending = list(messages)

    async def receive() -> Message:
        if pending:
            return pending.pop(0)
        if then is not None:
            return await then()
        return {"type": "http.disconnect"}

    return receive
