"""Throttling of failed key checks per client address (issue 24 §11): a token bucket.

Each failed check (an unknown API key, a failed console sign-in) takes a token from its
address's bucket, which holds at most ``burst`` tokens and gains ``per_second`` back; an
address whose bucket is empty is answered ``429`` with ``Retry-After`` before its key is
checked, so guessing keys costs time (300 bad keys took 2.1 s before). Valid keys from other
addresses are not affected; a valid key from a throttled address waits like any other request
from it. In-process: each API process keeps its own buckets (at most :data:`MAX_ADDRESSES`,
the stalest dropped first). The address is the connection's peer (a proxy in front must pass
the client's own, e.g. uvicorn's ``--forwarded-allow-ips``).
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

MAX_ADDRESSES = 10_000


@dataclass
class _Bucket:
    tokens: float
    updated: float


class FailedAuthThrottle:
    """Per-address token buckets of failed key checks; thread-safe."""

    def __init__(self, burst: int, per_second: float) -> None:
        if burst < 1 or not per_second > 0:
            raise ValueError("burst ≥ 1 and a positive refill rate")
        self._burst = float(burst)
        self._rate = per_second
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()
        self._lock = threading.Lock()

    def _bucket(self, address: str, now: float) -> _Bucket:
        bucket = self._buckets.get(address)
        if bucket is None:
            bucket = _Bucket(self._burst, now)
            self._buckets[address] = bucket
            while len(self._buckets) > MAX_ADDRESSES:
                self._buckets.popitem(last=False)
        else:
            bucket.tokens = min(self._burst, bucket.tokens + (now - bucket.updated) * self._rate)
            bucket.updated = now
            self._buckets.move_to_end(address)
        return bucket

    def retry_after(self, address: str) -> int | None:
        """Seconds until ``address`` may try again (None: it may now)."""
        now = time.monotonic()
        with self._lock:
            bucket = self._bucket(address, now)
            if bucket.tokens >= 1:
                return None
            return max(1, math.ceil((1 - bucket.tokens) / self._rate))

    def failed(self, address: str) -> None:
        """Record one failed check from ``address``."""
        now = time.monotonic()
        with self._lock:
            bucket = self._bucket(address, now)
            bucket.tokens = max(0.0, bucket.tokens - 1)
