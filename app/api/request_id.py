"""Every request gets an id (issue 27 §5): the client's ``X-Request-ID`` when it is a plain token,
else a new one; it is answered in the response's ``X-Request-ID`` header and written into the
audit entries of the request (app/audit/service.py), so an auditor can match an entry with the
client's and the proxy's logs.

A plain ASGI middleware (no ``BaseHTTPMiddleware``: it would buffer streamed downloads). The id
is held in a context variable: Starlette copies the context into the thread a sync route runs
on, so the services read it there without it being passed down.
"""

from __future__ import annotations

import re
import uuid
from contextvars import ContextVar

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADER = "X-Request-ID"
_ACCEPTED = re.compile(r"[A-Za-z0-9._:-]{1,128}")

_current: ContextVar[str | None] = ContextVar("rhosynth_request_id", default=None)


def current_request_id() -> str | None:
    """The id of the request being served (None outside a request: the CLI, the workers)."""
    return _current.get()


def request_id_of(headers: list[tuple[bytes, bytes]]) -> str:
    """The client's id if it is 1 to 128 characters of ``A-Za-z0-9._:-``, else a new one (so a
    header cannot smuggle text into the audit trail or the logs)."""
    for name, value in headers:
        if name.lower() == b"x-request-id":
            text = value.decode("latin-1")
            if _ACCEPTED.fullmatch(text):
                return text
            break
    return uuid.uuid4().hex


class RequestIdMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = request_id_of(scope.get("headers", []))

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)[HEADER] = request_id
            await send(message)

        token = _current.set(request_id)
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            _current.reset(token)
