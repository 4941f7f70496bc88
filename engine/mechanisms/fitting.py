"""Glue between the estimator and a mechanism's progress reporting."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
import numpy.typing as npt

from engine.estimation import GraphicalModel, NoisyMarginal, estimate
from engine.mechanisms.base import ProgressReporter, resolve_rows
from engine.mechanisms.compression import Compression


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


def fit_and_sample(
    noisy: Sequence[NoisyMarginal],
    warm: GraphicalModel,
    compression: Compression,
    *,
    iterations: int,
    max_cells: int,
    rows: int | None,
    max_rows: int | None,
    rng: np.random.Generator,
    synthesis: Literal["balanced", "round", "sample"],
    progress: ProgressReporter,
) -> tuple[npt.NDArray[np.int64], float]:
    """The last stage of the model-based mechanisms (AIM, PPSyn, PrivMRF): a warm-started final
    fit on every noisy measurement (progress 0.88 → 0.97), then ``rows`` (or the model's total)
    synthetic rows in the original codes. Post-processing only: ``rng`` is the job's seed.
    Reports the milestones ``final_fit`` and ``sample``, which the callers declare.

    Returns the codes and the model's estimated total."""
    progress.milestone("final_fit")
    progress(0.88, "estimate")
    model = estimate(
        warm.domain,
        noisy,
        warm_start=warm,
        iterations=iterations,
        max_cells=max_cells,
        callback=estimation_progress(progress, 0.88, 0.97, iterations),
    )
    progress.milestone("sample")
    progress(0.97, "sample")
    n_out = resolve_rows(rows, model.total, max_rows)
    codes = compression.decompress_codes(model.synthetic_data(n_out, rng, method=synthesis), rng)
    return codes, float(model.total)
