"""The ledger as a timeline: cumulative ρ granted, spent and reserved, drawn as a PNG.

Built only from the ledger's entries (owner keys see them through ``GET /v1/datasets/{id}/ledger``):
``grant`` raises the total; ``discover`` is spent at once; ``reserve`` holds ρ for a job, which
``spend`` turns into spent and ``release`` hands back. Drawn with matplotlib on its own Agg canvas
(no pyplot, no global state), like the reports' plots (engine/reports/plots.py).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.dates import AutoDateLocator, ConciseDateFormatter
from matplotlib.figure import Figure

from app.datasets.schemas import LedgerEntryOut

DPI = 80


def ledger_series(
    entries: Sequence[LedgerEntryOut],
) -> tuple[list[datetime], list[Decimal], list[Decimal], list[Decimal]]:
    """After each entry (oldest first): its time and the cumulative ρ granted, spent, reserved."""
    granted = spent = reserved = Decimal(0)
    times: list[datetime] = []
    g: list[Decimal] = []
    s: list[Decimal] = []
    r: list[Decimal] = []
    for entry in sorted(entries, key=lambda e: e.id):
        rho = Decimal(entry.rho)
        if entry.kind == "grant":
            granted += rho
        elif entry.kind == "discover":
            spent += rho
        elif entry.kind == "reserve":
            reserved += rho
        elif entry.kind == "spend":
            reserved -= rho
            spent += rho
        else:  # release
            reserved -= rho
        times.append(entry.at)
        g.append(granted)
        s.append(spent)
        r.append(reserved)
    return times, g, s, r


# Tick labels at each level of ConciseDateFormatter (years, months, days, hours, minutes,
# seconds): every tick names its hour and minute, so a ledger of a few minutes reads
# "05:45:50, 05:45:55, 05:46:00" rather than its default "50, 55, 05:46, 05".
TICK_FORMATS = ["%Y", "%b", "%d %b", "%H:%M", "%H:%M", "%H:%M:%S"]
ZERO_FORMATS = ["", "%Y", "%b", "%d %b %H:%M", "%H:%M", "%H:%M:%S"]
MIN_SPAN = np.timedelta64(60, "s")
"""The shortest time axis drawn: ticks of whole seconds, each label different."""


def ledger_timeline_png(entries: Sequence[LedgerEntryOut]) -> bytes:
    """A step plot of :func:`ledger_series` (an empty ledger draws empty axes)."""
    figure = ledger_timeline(entries)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    return buffer.getvalue()


def ledger_timeline(entries: Sequence[LedgerEntryOut]) -> Figure:
    """The figure of :func:`ledger_timeline_png`, times in UTC."""
    times, granted, spent, reserved = ledger_series(entries)
    stamps = np.array([t.replace(tzinfo=None) for t in times], dtype="datetime64[us]")  # UTC
    if len(stamps):
        # Each level holds after the last entry: the lines run on to the axis' right end (a
        # grant and a discovery in the same second were otherwise a bare vertical stroke).
        span = stamps[-1] - stamps[0]
        middle = stamps[0] + span / 2
        end = middle + MIN_SPAN / 2 if span < MIN_SPAN else stamps[-1] + span / 20
        stamps = np.append(stamps, end)
        granted, spent, reserved = ([*v, v[-1]] for v in (granted, spent, reserved))
    figure = Figure(figsize=(8, 3), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    for name, values, style in (
        ("granted (total)", granted, "-"),
        ("spent", spent, "-"),
        ("reserved (running jobs)", reserved, "--"),
    ):
        axes.step(stamps, [float(v) for v in values], style, where="post", label=name)
    axes.set_ylabel("cumulative ρ")
    axes.set_ylim(bottom=0)
    axes.grid(True, alpha=0.3)
    if times:
        axes.legend(loc="upper left", fontsize="small")
    axes.set_xlabel("time (UTC)")
    if len(stamps) and stamps[-2] - stamps[0] < MIN_SPAN:
        # Entries within seconds of each other (an upload's grant and discovery): ticks a
        # fraction of a second apart all read the same second, so show a minute around them.
        middle = stamps[0] + (stamps[-2] - stamps[0]) / 2
        axes.set_xlim(middle - MIN_SPAN / 2, middle + MIN_SPAN / 2)
    locator = AutoDateLocator(maxticks=7)  # type: ignore[no-untyped-call]
    axes.xaxis.set_major_locator(locator)
    axes.xaxis.set_major_formatter(
        ConciseDateFormatter(  # type: ignore[no-untyped-call]
            locator, formats=TICK_FORMATS, zero_formats=ZERO_FORMATS
        )
    )
    return figure
