"""A clock a test moves by hand, for code that reads ``utcnow`` from its module."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


class Clock:
    """Starts at the real time; ``advance`` moves it. Patched over a module's ``utcnow``."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)
