"""Glue between the estimator and a mechanism's progress reporting."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from engine.estimation import GraphicalModel, NoisyMarginal, estimate
from engine.mechanisms.base import ProgressReporter, resolve_rows
from engine.models.compression import Compression
from engine.models.fitted import FittedModel
from engine.models.kinds import GraphicalModelKind


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


def graphical_fitted_model(
    method: str,
    model: GraphicalModel,
    compression: Compression,
    synthesis: Literal["balanced", "round", "sample"],
) -> FittedModel:
    """The saved form of a graphical-model method's final ``model`` (on the compressed domain)
    with its ``compression``: a :class:`FittedModel` of kind ``"graphical"`` over the original
    domain. Post-processing of the noisy measurements the model was fitted to."""
    return FittedModel(
        method=method,
        domain=compression.original,
        estimated_total=float(model.total),
        body=GraphicalModelKind.from_fit(model, compression, synthesis),
    )


def graphical_extra(model: GraphicalModel) -> dict[str, list[list[str]]]:
    """The public facts a graphical-model run reports: its junction tree's maximal cliques."""
    return {"cliques": [list(clique) for clique in model.cliques]}


def fit_and_sample(
    method: str,
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
    momentum: bool = False,
    cliques: Sequence[Sequence[str]] = (),
) -> tuple[npt.NDArray[np.integer[Any]], float, FittedModel, dict[str, list[list[str]]]]:
    """The last stage of the model-based mechanisms (AIM, PPSyn, PrivMRF): a warm-started final
    fit on every noisy measurement (progress 0.88 → 0.97), then ``rows`` (or the model's total)
    synthetic rows in the original codes. Post-processing only: ``rng`` is the job's seed.
    ``cliques`` are passed to ``estimate`` (AIM's locally grown structure).
    Reports the milestones ``final_fit`` and ``sample``, which the callers declare.

    The rows are drawn from the saved model (:func:`graphical_fitted_model`), so they are a
    sample of exactly what the run keeps. Returns the codes, the model's estimated total, the
    saved model and the run's public facts (:func:`graphical_extra`)."""
    progress.milestone("final_fit")
    progress(0.88, "estimate")
    model = estimate(
        warm.domain,
        noisy,
        cliques=cliques,
        warm_start=warm,
        iterations=iterations,
        max_cells=max_cells,
        callback=estimation_progress(progress, 0.88, 0.97, iterations),
        momentum=momentum,
    )
    progress.milestone("sample")
    progress(0.97, "sample")
    n_out = resolve_rows(rows, model.total, max_rows)
    fitted = graphical_fitted_model(method, model, compression, synthesis)
    codes = fitted.sample(n_out, rng)
    return codes, float(model.total), fitted, graphical_extra(model)
