"""Glue between the estimator and a mechanism's progress reporting."""

from __future__ import annotations

from collections.abc import Callable

from engine.mechanisms.base import ProgressReporter


def estimation_progress(
    progress: ProgressReporter, start: float, end: float, iterations: int, stage: str = "estimate"
) -> Callable[[int, float], None]:
    """A callback for ``engine.estimation.estimate`` that moves the progress bar from ``start``
    towards ``end`` as iterations pass. Cancellation raised by ``progress`` propagates through
    the estimator unchanged."""

    def callback(iteration: int, _loss: float) -> None:
        done = min(1.0, max(0.0, iteration / max(1, iterations)))
        progress(max(progress.fraction, start + (end - start) * done), stage)

    return callback
