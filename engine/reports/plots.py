"""Static plots for the HTML reports: matplotlib figures rendered to inline PNG data URIs.

Each plot is a :class:`matplotlib.figure.Figure` drawn on its own Agg canvas (no pyplot, no
global state), saved as PNG without a timestamp and embedded as ``data:image/png;base64,...``, so
a report opens offline and fetches nothing. Labels are drawn as plain text (``$`` escaped so
matplotlib never parses them as math); the figures are built from a report's numbers, never from
data.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

MAX_LABEL_CHARS = 32
DPI = 80
MAX_ANNOTATED = 10
"""Heatmaps of at most this many columns print each cell's value."""


def plot_text(label: str, limit: int = MAX_LABEL_CHARS) -> str:
    """A label safe to draw: math mode disabled, at most ``limit`` characters."""
    text = label if len(label) <= limit else label[: limit - 1] + "…"
    return text.replace("\\", "\\\\").replace("$", r"\$")


def _png(figure: Figure) -> str:
    FigureCanvasAgg(figure)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _numbers(values: Sequence[float | None]) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in values], dtype=np.float64)


def bar_plot(
    labels: Sequence[str],
    series: Sequence[tuple[str, Sequence[float | None], Sequence[float | None] | None]],
    title: str,
) -> str:
    """Horizontal grouped bars, one group per label, one bar per ``(name, values, errors)``."""
    count = max(len(labels), 1)
    figure = Figure(
        figsize=(6.4, 1.4 + 0.28 * count * max(len(series), 1) ** 0.5), layout="constrained"
    )
    axes = figure.add_subplot()
    height = 0.8 / max(len(series), 1)
    positions = np.arange(len(labels), dtype=np.float64)
    for i, (name, values, errors) in enumerate(series):
        axes.barh(
            positions + (i - (len(series) - 1) / 2) * height,
            _numbers(values),
            height=height,
            xerr=None if errors is None else _numbers(errors),
            label=plot_text(name),
            capsize=2,
        )
    axes.set_yticks(positions, [plot_text(label) for label in labels], fontsize=8)
    axes.invert_yaxis()
    axes.set_xlabel("share of rows")
    axes.set_title(plot_text(title), fontsize=10)
    figure.legend(loc="outside lower center", ncols=len(series), fontsize=8)
    return _png(figure)


def heatmap_plot(
    columns: Sequence[str],
    matrices: Sequence[tuple[str, Sequence[Sequence[float | None]]]],
    *,
    low: float,
    high: float,
    diverging: Sequence[bool] | None = None,
) -> str:
    """Matrices side by side on one colour scale (``low``..``high``; diverging ones centred)."""
    count = len(matrices)
    size = min(2.5 + 0.22 * len(columns), 8.0)
    figure = Figure(figsize=(size * count + 0.8, size))
    flags = diverging or [False] * count
    for i, (title, matrix) in enumerate(matrices):
        axes = figure.add_subplot(1, count, i + 1)
        values = np.array(
            [[np.nan if v is None else v for v in row] for row in matrix], dtype=np.float64
        ).reshape(len(columns), len(columns))
        if flags[i]:
            bound = max(abs(low), abs(high))
            image = axes.imshow(values, cmap="RdBu_r", vmin=-bound, vmax=bound)
        else:
            image = axes.imshow(values, cmap="viridis", vmin=low, vmax=high)
        ticks = np.arange(len(columns))
        names = [plot_text(c) for c in columns]
        axes.set_xticks(ticks, names, rotation=90, fontsize=7)
        axes.set_yticks(ticks, names, fontsize=7)
        axes.set_title(plot_text(title), fontsize=10)
        if len(columns) <= MAX_ANNOTATED:
            for (row, col), value in np.ndenumerate(values):
                if np.isfinite(value):
                    dark = abs(value) > 0.6 if flags[i] else value < 0.5 * (low + high)
                    axes.text(
                        col,
                        row,
                        f"{value:.2f}",
                        ha="center",
                        va="center",
                        fontsize=7,
                        color="white" if dark else "black",
                    )
        figure.colorbar(image, ax=axes, shrink=0.7)
    figure.tight_layout()
    return _png(figure)


def histogram_plot(
    edges: Sequence[float | None],
    series: Sequence[tuple[str, Sequence[float | None]]],
    *,
    xlabel: str,
) -> str:
    """Shares per bin (``edges`` as bin bounds), one bar series per ``(name, shares)``."""
    bounds = _numbers(edges)
    centres = (bounds[:-1] + bounds[1:]) / 2
    width = float(np.min(np.diff(bounds))) / (len(series) + 0.5)
    figure = Figure(figsize=(6.4, 3.4), layout="constrained")
    axes = figure.add_subplot()
    for i, (name, values) in enumerate(series):
        axes.bar(
            centres + (i - (len(series) - 1) / 2) * width,
            _numbers(values),
            width=width,
            label=plot_text(name),
        )
    axes.set_xlabel(plot_text(xlabel, limit=100))
    axes.set_ylabel("share of rows")
    figure.legend(loc="outside lower center", ncols=len(series), fontsize=8)
    return _png(figure)
