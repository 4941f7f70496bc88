"""Verifying rhosynth's webhook signatures on the receiving side (no server imports).

Each delivery carries ``Rhosynth-Signature: t=<unix seconds>,v1=<hex>`` where ``<hex>`` is
HMAC-SHA256 of ``f"{t}.{body}"`` under the subscription's secret (Stripe's scheme). Verify the raw
body as received, before parsing it::

    event = verify_webhook(secret, request_body, request.headers["Rhosynth-Signature"])
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Any


class WebhookVerificationError(ValueError):
    """The signature header is missing, malformed, wrong, or older than the tolerance."""


def verify_webhook(
    secret: str,
    body: bytes,
    header: str,
    tolerance: float = 300,
    *,
    now: float | None = None,
) -> dict[str, Any]:
    """The event (the parsed body) if ``header`` signs ``body`` under ``secret`` and its
    timestamp is within ``tolerance`` seconds of ``now`` (default: the current time);
    raises :class:`WebhookVerificationError` otherwise. Several ``v1`` signatures may be
    present; one match suffices."""
    timestamp: int | None = None
    signatures: list[str] = []
    for part in (header or "").split(","):
        name, _, value = part.strip().partition("=")
        if name == "t":
            try:
                timestamp = int(value)
            except ValueError:
                raise WebhookVerificationError("malformed timestamp in the signature") from None
        elif name == "v1" and value:
            signatures.append(value)
    if timestamp is None or not signatures:
        raise WebhookVerificationError("no t= timestamp or v1= signature in the header")
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance:
        raise WebhookVerificationError("the signature's timestamp is outside the tolerance")
    signed = f"{timestamp}.".encode() + body
    expected = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest().encode()
    # As bytes: compare_digest raises TypeError on a str with non-ASCII text (a forged header).
    if not any(
        hmac.compare_digest(expected, candidate.encode("utf-8", "replace"))
        for candidate in signatures
    ):
        raise WebhookVerificationError("the signature does not match the body")
    try:
        event: dict[str, Any] = json.loads(body)
    except ValueError:
        raise WebhookVerificationError("the signed body is not JSON") from None
    return event
