"""Sending the outbox: signed HTTP POSTs, at least once, in order per job, with backoff.

Runs in the webhook worker (``rhosynth worker --webhooks``, its own queue), never in an API
request or a job worker's slot. A pass claims due deliveries in a short transaction, sends each
with no transaction open (timeouts ``RHOSYNTH_WEBHOOK_TIMEOUT_SECONDS`` to connect and to read),
and records each outcome in another short transaction. It is triggered by a message after the
commit that wrote an event, and by the recovery loop of every worker when deliveries are due
(a lost message or a backoff that ran out).

Retries: after a try that fails (no answer, or not 2xx) the next one waits ``BACKOFF_SECONDS``
in turn (10 s, 30 s, 2 min, 10 min, 30 min, 1 h, 2 h, 4 h, 8 h, 8 h: eleven tries over about
23.7 hours); after the last the delivery is ``failed`` (given up) and can be replayed.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import httpx
from sqlalchemy.orm import Session, sessionmaker

from app.config import Settings
from app.db.base import utcnow
from app.db.session import get_session_factory, transaction
from app.jobs import dispatch
from app.webhooks import repository
from workers.celery_app import DELIVER_WEBHOOKS_TASK

logger = logging.getLogger(__name__)

BACKOFF_SECONDS = (10, 30, 120, 600, 1800, 3600, 7200, 14400, 28800, 28800)
# A claimed delivery is due again after this if its sender died before recording the outcome
# (it must exceed one send: connect plus read timeouts).
CLAIM_LEASE_SECONDS = 120
_BATCH = 20
SIGNATURE_HEADER = "Rhosynth-Signature"


def signature_header(secrets: Sequence[str], body: bytes, timestamp: int) -> str:
    """``t=<unix seconds>,v1=<hex HMAC-SHA256(secret, f"{t}.{body}")>`` (Stripe's scheme), one
    ``v1`` per secret (two during a rotation's overlap)."""
    signed = f"{timestamp}.".encode() + body
    digests = [hmac.new(s.encode(), signed, hashlib.sha256).hexdigest() for s in secrets]
    return ",".join([f"t={timestamp}", *(f"v1={digest}" for digest in digests)])


def encode_payload(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()


def ring(settings: Settings, event_id: uuid.UUID) -> None:
    """Tell the webhook worker an event is waiting (after its commit; never blocks)."""
    dispatch.ring(settings, event_id, DELIVER_WEBHOOKS_TASK, queue=settings.webhook_queue)


def ring_if_due(settings: Settings) -> bool:
    """The periodic sweep (the recovery loop): one message to the webhook worker if any
    delivery is due. Returns whether one was sent."""
    factory = get_session_factory(settings.sqlalchemy_url)
    with transaction(factory) as session:
        due = repository.any_due(session, utcnow())
    if due:
        return dispatch.enqueue_job(
            settings, uuid.uuid4(), DELIVER_WEBHOOKS_TASK, queue=settings.webhook_queue
        )
    return False


def next_try(tries: int, now: datetime) -> tuple[str, datetime]:
    """After the ``tries``-th failed try (1-based): still ``pending`` at the returned time, or
    ``failed`` (given up)."""
    if tries > len(BACKOFF_SECONDS):
        return "failed", now
    return "pending", now + timedelta(seconds=BACKOFF_SECONDS[tries - 1])


@dataclass(frozen=True)
class _Outgoing:
    delivery_id: uuid.UUID
    tries: int
    url: str
    secrets: tuple[str, ...]
    event_id: uuid.UUID
    body: bytes


@dataclass
class DeliveryReport:
    delivered: int = 0
    retrying: int = 0
    failed: int = 0


def deliver_due(settings: Settings, *, http: httpx.Client | None = None) -> DeliveryReport:
    """Send every delivery that is due now, until none is left; returns what happened."""
    factory = get_session_factory(settings.sqlalchemy_url)
    report = DeliveryReport()
    timeout = httpx.Timeout(settings.webhook_timeout_seconds)
    client = http or httpx.Client(timeout=timeout, follow_redirects=False, trust_env=False)
    try:
        while True:
            claimed, lease_until = _claim(factory)
            if not claimed:
                return report
            for delivery_id in claimed:
                _send_one(factory, client, delivery_id, lease_until, report)
    finally:
        if http is None:
            client.close()


def _claim(factory: sessionmaker[Session]) -> tuple[list[uuid.UUID], datetime]:
    """The claimed deliveries and the instant their claim's lease runs out."""
    now = utcnow()
    lease_until = now + timedelta(seconds=CLAIM_LEASE_SECONDS)
    with transaction(factory) as session:
        claimed = repository.claim_due(session, now=now, lease_until=lease_until, limit=_BATCH)
    return claimed, lease_until


def _send_one(
    factory: sessionmaker[Session],
    client: httpx.Client,
    delivery_id: uuid.UUID,
    lease_until: datetime,
    report: DeliveryReport,
) -> None:
    if utcnow() >= lease_until:
        # The batch's earlier sends outlasted the claim: the delivery is due again, and another
        # pass may be sending it now. Left to the next claim (this pass's or another's).
        return
    with transaction(factory) as session:
        found = repository.delivery_to_send(session, delivery_id)
        if found is None or found[0].status != "pending":
            return
        delivery, event, subscription = found
        if subscription.deleted_at is not None:
            # Written by a transaction that read the subscription before its deletion committed
            # (the deletion discards only the deliveries it can see): owed to no one now.
            repository.discard(session, delivery_id)
            return
        signing = [subscription.secret]
        until = subscription.previous_secret_until
        if subscription.previous_secret is not None and until is not None and utcnow() < until:
            signing.append(subscription.previous_secret)
        outgoing = _Outgoing(
            delivery_id=delivery.id,
            tries=delivery.tries,
            url=subscription.url,
            secrets=tuple(signing),
            event_id=event.public_id,
            body=encode_payload(event.payload),
        )
    # No transaction is open while the receiver answers.
    status_code, error = _post(client, outgoing)
    now = utcnow()
    if status_code is not None and 200 <= status_code < 300:
        status, next_at = "delivered", now
        report.delivered += 1
    else:
        status, next_at = next_try(outgoing.tries + 1, now)
        if status == "failed":
            report.failed += 1
            logger.warning(
                "webhook delivery %s given up after %d tries", delivery_id, outgoing.tries + 1
            )
        else:
            report.retrying += 1
    with transaction(factory) as session:
        repository.record_attempt(
            session,
            delivery_id,
            now=now,
            status=status,
            status_code=status_code,
            error=error,
            next_attempt_at=next_at,
        )


def _post(client: httpx.Client, outgoing: _Outgoing) -> tuple[int | None, str | None]:
    timestamp = int(utcnow().timestamp())
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "rhosynth-webhooks/1",
        SIGNATURE_HEADER: signature_header(outgoing.secrets, outgoing.body, timestamp),
        "Rhosynth-Event-Id": str(outgoing.event_id),
        "Rhosynth-Delivery-Id": str(outgoing.delivery_id),
    }
    try:
        response = client.post(outgoing.url, content=outgoing.body, headers=headers)
    except httpx.HTTPError as error:
        # The error's kind only: its text can carry the receiver's answer.
        return None, type(error).__name__
    return response.status_code, None
