"""Independent columns: the baseline that keeps every 1-way marginal and no correlation."""

from __future__ import annotations

import random
from fractions import Fraction

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict

from engine.accounting import split_rho
from engine.counting import CountingEngine
from engine.domain import Domain
from engine.estimation.simplex import project_to_simplex
from engine.marginals import Measurement, measure_marginal
from engine.mechanisms.base import (
    Mechanism,
    Milestone,
    ProgressReporter,
    SynthesisResult,
    resolve_rows,
)
from engine.mechanisms.preview import NoisePreview, one_way_previews
from engine.models.fitted import FittedModel
from engine.models.kinds import IndependentModel

FloatArray = npt.NDArray[np.float64]


class IndependentParams(BaseModel):
    """The independent mechanism takes no parameters."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def one_way_rhos(domain: Domain, rho: Fraction) -> tuple[Fraction, ...]:
    """ρ per one-way marginal: equal parts of ``rho``, one per column."""
    return split_rho(rho, [1] * len(domain))


def estimate_total(measurements: tuple[Measurement, ...]) -> float:
    """Precision-weighted average of the measurements' noisy sums, clipped at 0 (post-processing).

    The sum of a marginal with c cells and per-cell noise variance σ² has variance c·σ², so each
    noisy sum is weighted by 1/(c·σ²), the inverse-variance (minimum-variance unbiased) weighting.
    """
    weights = np.array([1.0 / (m.noisy_counts.size * float(m.sigma2)) for m in measurements])
    sums = np.array([float(m.noisy_counts.sum()) for m in measurements])
    return max(0.0, float(np.dot(weights, sums) / weights.sum()))


class IndependentMechanism(Mechanism):
    """Measure every 1-way marginal, make them consistent, sample each column independently.

    Per privacy unit (at most k rows after truncation; ``run(..., contribution_bound=k)``): the
    run below is made at the row-level budget ρ/k² and each release is stated with sensitivity
    k·Δ and ρ k²·ρ_i, σ² unchanged, so the charges add up to ρ per unit (engine/privacy_unit/
    group.py: k rows move a statistic of per-row sensitivity Δ by at most kΔ; for a count k is
    attained, all of a unit's rows in one cell, so no tighter bound holds).

    Privacy: d measurements, one per attribute, each the attribute's histogram (L2 sensitivity 1
    under add/remove-one-row) plus discrete Gaussian noise with σ² = d/(2ρ), i.e. ρ/d-zCDP each
    (Canonne, Kamath, Steinke 2020, Theorem 14); by composition (Bun & Steinke 2016, Lemma 2.3)
    the mechanism is exactly ρ-zCDP. Estimating the total, projecting onto the simplex and sampling
    rows are post-processing of the noisy histograms.
    """

    name = "independent"
    description = (
        "Noisy 1-way marginals with the budget split equally across columns; columns are "
        "sampled independently, so no correlation between columns is kept."
    )
    Params = IndependentParams
    resamplable = True
    milestones = (
        Milestone("measure_one_way", 0.0),
        Milestone("estimate", 0.6),
        Milestone("sample", 0.7),
    )

    def first_noise(
        self, domain: Domain, params: BaseModel, rho: Fraction
    ) -> tuple[NoisePreview, ...]:
        """The one-way marginal of every column, at equal parts of ρ."""
        del params
        return one_way_previews(domain.attributes, one_way_rhos(domain, rho))

    def _synthesize_counts(
        self,
        data: CountingEngine,
        rho: Fraction,
        params: BaseModel,
        *,
        rng: np.random.Generator,
        rows: int | None,
        max_rows: int | None,
        progress: ProgressReporter,
        noise_source: random.Random | None,
    ) -> SynthesisResult:
        # Reads the data only through measure_marginal's counts: runs on any counting engine.
        attributes = data.domain.attributes
        d = len(attributes)

        progress.milestone("measure_one_way")
        progress(0.0, "measure")
        measurements: list[Measurement] = []
        parts = one_way_rhos(data.domain, rho)
        for i, (attr, rho_attr) in enumerate(zip(attributes, parts, strict=True)):
            measurements.append(measure_marginal(data, [attr], rho_attr, noise_source))
            progress(0.6 * (i + 1) / d, "measure")

        progress.milestone("estimate")
        progress(0.6, "estimate")
        total = estimate_total(tuple(measurements))
        marginals = [project_to_simplex(m.noisy_counts, total) for m in measurements]
        progress(0.7, "estimate")

        progress.milestone("sample")
        progress(0.7, "sample")
        n_out = resolve_rows(rows, total, max_rows)
        model = FittedModel(
            method=self.name,
            domain=data.domain,
            estimated_total=total,
            body=IndependentModel(tuple(marginals)),
        )
        codes = model.sample(n_out, rng)
        progress(1.0, "sample")

        return SynthesisResult(
            codes=codes,
            measurements=tuple(measurements),
            rho_used=sum((m.rho for m in measurements), Fraction(0)),
            estimated_total=total,
            model=model,
        )
