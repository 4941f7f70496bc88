"""Request body caps enforced while the body streams in (before any parsing), and JSON bodies
held to finite numbers."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import HTTPException, Request, Response
from fastapi.routing import APIRoute
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodyTooLarge(HTTPException):
    """The body passed its cap while streaming in.

    An ``HTTPException`` (413) so that it keeps its status wherever it is raised: FastAPI turns
    any other exception raised while it reads a JSON body into ``400``.
    """

    def __init__(self, limit: int) -> None:
        super().__init__(413, _too_large_detail(limit), headers={"Connection": "close"})
        self.limit = limit


class BodySizeLimitMiddleware:
    """Answer 413 as soon as a body is known to exceed its route's cap.

    A declared ``Content-Length`` over the cap is refused before reading anything; a chunked or
    lying body is counted as it arrives and cut off at the cap. Nothing over the cap is spooled.
    """

    def __init__(self, app: ASGIApp, limit_for: Callable[[Scope], int]) -> None:
        self.app = app
        self.limit_for = limit_for

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope)
        declared = _content_length(scope)
        if declared is not None and (declared < 0 or declared > limit):
            await _too_large(limit)(scope, receive, send)
            return

        received = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(limit)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except BodyTooLarge:
            if started:
                raise
            await _too_large(limit)(scope, receive, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return -1
    return None


def _too_large_detail(limit: int) -> str:
    return f"request body exceeds the limit of {limit} bytes"


def _too_large(limit: int) -> JSONResponse:
    return JSONResponse(
        {"detail": _too_large_detail(limit)}, status_code=413, headers={"Connection": "close"}
    )


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # "1e400" parses to inf
        raise json.JSONDecodeError("numbers must be finite", text, 0)
    return value


MAX_JSON_INT_DIGITS = 100


def _bounded_int(text: str) -> int:
    # Python refuses to parse ints over 4300 digits with a ValueError FastAPI would turn into
    # 400; no field of this API takes an integer anywhere near 100 digits.
    if len(text.lstrip("-")) > MAX_JSON_INT_DIGITS:
        raise json.JSONDecodeError(f"integers are limited to {MAX_JSON_INT_DIGITS} digits", "", 0)
    return int(text)


def _no_constants(name: str) -> Any:
    raise json.JSONDecodeError(f"{name} is not a JSON number", name, 0)


class FiniteJSONRequest(Request):
    """A request whose JSON body may not hold NaN, Infinity or numbers that overflow a float.

    Python's json module accepts them by default; they could then reach a ``Decimal``, a JSON
    column or an error response, none of which can represent them. A ``JSONDecodeError`` here
    becomes FastAPI's ``422`` with ``type: json_invalid``.
    """

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            try:
                self._json = json.loads(
                    body,
                    parse_float=_finite_float,
                    parse_int=_bounded_int,
                    parse_constant=_no_constants,
                )
            except RecursionError:  # FastAPI would answer 400 "error parsing the body"
                raise json.JSONDecodeError("JSON nested too deeply", "", 0) from None
        return self._json


class FiniteJSONRoute(APIRoute):
    """Routes that parse their JSON body with :class:`FiniteJSONRequest`."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def finite_json_handler(request: Request) -> Response:
            return await handler(FiniteJSONRequest(request.scope, request.receive))

        return finite_json_handler
