"""The ledger timeline's time axis (issue 26 §4: a ledger of a few minutes read
"45, 50, 55, 05:50, 05", seconds without their minute)."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from matplotlib.dates import date2num

from app.console.plots import ledger_timeline, ledger_timeline_png
from app.datasets.schemas import LedgerEntryOut


def _entries(start: datetime, step: timedelta, count: int) -> list[LedgerEntryOut]:
    entries = [
        LedgerEntryOut(
            id=1, kind="grant", rho=Decimal(1), delta=Decimal(0), job_id=None, actor="key:x",
            at=start, detail=None,
        )
    ]  # fmt: skip
    for i in range(1, count):
        kind = "reserve" if i % 2 else "spend"
        entries.append(
            LedgerEntryOut(
                id=i + 1, kind=kind, rho=Decimal("0.01"), delta=Decimal(0),
                job_id=uuid.uuid4(), actor="worker", at=start + i * step, detail=None,
            )
        )  # fmt: skip
    return entries


@pytest.mark.parametrize(
    ("step", "pattern"),
    [
        (timedelta(seconds=7), r"^\d\d:\d\d:\d\d$"),  # under two minutes: seconds
        (timedelta(minutes=3), r"^\d\d:\d\d(:\d\d)?$"),  # an hour: hours and minutes
    ],
)
def test_every_tick_names_its_hour_and_minute(step: timedelta, pattern: str) -> None:
    figure = ledger_timeline(_entries(datetime(2026, 12, 3, 5, 45, 48, tzinfo=UTC), step, 16))
    figure.canvas.draw()
    [axes] = figure.axes
    labels = [label.get_text() for label in axes.get_xticklabels() if label.get_text()]
    assert len(labels) >= 3, labels
    assert all(re.match(pattern, label) for label in labels), labels
    assert axes.get_xlabel() == "time (UTC)"


@pytest.mark.parametrize(
    "step",
    [timedelta(0), timedelta(milliseconds=40), timedelta(seconds=2), timedelta(seconds=40)],
)
def test_entries_within_seconds_get_distinct_ticks(step: timedelta) -> None:
    """An upload's grant and discovery land in the same second: the axis read
    "16:46:55, 16:46:55, 16:46:55" (ticks a fraction of a second apart). Every entry stays on
    the axis (entries 40 s apart fell off a minute drawn from the first one)."""
    start = datetime(2026, 12, 3, 16, 46, 55, tzinfo=UTC)
    figure = ledger_timeline(_entries(start, step, 2))
    figure.canvas.draw()
    [axes] = figure.axes
    labels = [label.get_text() for label in axes.get_xticklabels() if label.get_text()]
    assert len(labels) >= 2 and len(set(labels)) == len(labels), labels
    low, high = axes.get_xlim()
    for at in (start, start + step):
        assert low <= date2num(at.replace(tzinfo=None)) <= high, at


def test_the_png_is_drawn() -> None:
    png = ledger_timeline_png(_entries(datetime(2026, 12, 3, tzinfo=UTC), timedelta(hours=5), 9))
    assert png.startswith(b"\x89PNG")


def test_the_ledger_table_shows_the_running_spend_as_epsilon() -> None:
    """Issue 26 §4: ε beside ρ in the ledger, as a running total of what was spent (ε of one
    entry would not add up)."""
    from app.console.endpoints import GAUGE_CONVERSION_DELTA, epsilon_text, spent_epsilons

    at = datetime(2026, 12, 3, tzinfo=UTC)
    job = uuid.uuid4()

    def entry(i: int, kind: str, rho: str, delta: str = "0") -> LedgerEntryOut:
        return LedgerEntryOut(
            id=i, kind=kind, rho=Decimal(rho), delta=Decimal(delta), job_id=job,
            actor="worker", at=at, detail=None,
        )  # fmt: skip

    entries = [
        entry(1, "grant", "2", "0.000001"),
        entry(2, "discover", "0.4", "0.0000005"),
        entry(3, "reserve", "0.5"),
        entry(4, "spend", "0.5"),
        entry(5, "reserve", "0.3"),
        entry(6, "release", "0.3"),
    ]
    shown = spent_epsilons(list(reversed(entries)))
    assert set(shown) == {2, 4}
    assert shown[2] == f"{epsilon_text(Decimal('0.4'), GAUGE_CONVERSION_DELTA)} at δ = 1.5 × 10⁻⁶"
    assert shown[4] == f"{epsilon_text(Decimal('0.9'), GAUGE_CONVERSION_DELTA)} at δ = 1.5 × 10⁻⁶"
    assert float(shown[4].split()[0]) > float(shown[2].split()[0])
