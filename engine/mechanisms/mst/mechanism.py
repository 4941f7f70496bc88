"""MST: the maximum-spanning-tree mechanism (McKenna, Miklau, Sheldon, "Winning the NIST Contest:
A scalable and general approach to differentially private synthetic data", JPC 2021)."""

from __future__ import annotations

import itertools
import random
from fractions import Fraction
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from engine.accounting import split_rho
from engine.counting import CountingEngine
from engine.domain import Domain
from engine.estimation import NoisyMarginal, estimate
from engine.marginals import Measurement, count_marginals, measure_marginal
from engine.mechanisms.base import (
    GRAPHICAL_OUTPUT,
    Mechanism,
    Milestone,
    ProgressReporter,
    ResourceEstimate,
    SelectionCharge,
    SynthesisResult,
    largest_cells,
    marginal_cells,
    resolve_rows,
    resource_estimate,
)
from engine.mechanisms.fitting import (
    estimation_progress,
    graphical_extra,
    graphical_fitted_model,
)
from engine.mechanisms.preview import NoisePreview, one_way_previews
from engine.models.compression import compress_after_one_ways, measured_axis_maps
from engine.selection import epsilon_for_rho, exponential_mechanism


class MSTParams(BaseModel):
    """Parameters of MST."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    compress: bool = Field(
        default=True,
        description="merge the values whose noisy count is below 3σ into one code (as in MST)",
    )
    selection_iterations: int = Field(
        default=300, ge=1, le=100_000, description="mirror-descent iterations of the 1-way fit"
    )
    iterations: int = Field(
        default=2000, ge=1, le=100_000, description="mirror-descent iterations of the final fit"
    )
    synthesis: Literal["balanced", "round", "sample"] = Field(
        default="balanced",
        description="'balanced' (controlled rounding, values spread evenly across the attributes "
        "drawn before), 'round' (controlled rounding) or 'sample' (i.i.d. rows)",
    )


def budget_split(columns: int, rho: Fraction) -> tuple[Fraction, Fraction, Fraction]:
    """ρ → (one-way marginals, pair selection, pair marginals): thirds, or all of ρ to the one
    one-way marginal when there is a single column."""
    if columns < 2:
        return rho, Fraction(0), Fraction(0)
    one_way, select, two_way = split_rho(rho, [1, 1, 1])
    return one_way, select, two_way


class _UnionFind:
    def __init__(self, items: list[str]) -> None:
        self.parent = {item: item for item in items}

    def find(self, item: str) -> str:
        while self.parent[item] != item:
            self.parent[item] = self.parent[self.parent[item]]
            item = self.parent[item]
        return item

    def union(self, a: str, b: str) -> None:
        self.parent[self.find(a)] = self.find(b)


class MSTMechanism(Mechanism):
    """Measure all one-way marginals, choose a maximum spanning tree of two-way marginals with the
    exponential mechanism, measure its edges, fit a graphical model, sample.

    Per privacy unit (at most k rows after truncation; ``run(..., contribution_bound=k)``): the
    run below is made at the row-level budget ρ/k² and each release is stated with sensitivity
    k·Δ and ρ k²·ρ_i, σ² unchanged, so the charges add up to ρ per unit (engine/privacy_unit/
    group.py: k rows move a statistic of per-row sensitivity Δ by at most kΔ; for a count k is
    attained, all of a unit's rows in one cell, so no tighter bound holds). The
    L1-error scores of the tree selection move by at most k.

    Privacy (add/remove one row, ρ-zCDP): ρ is split exactly into thirds.
    * ρ/3 over the d one-way marginals (ρ/(3d) each; L2 sensitivity 1; discrete Gaussian with
      σ² = 3d/(2ρ); CKS 2020).
    * ρ/3 over d − 1 exponential-mechanism draws (ρ/(3(d − 1)) each). Each draw scores the
      remaining candidate pairs by the L1 distance between the pair's true counts and the
      estimate of a model fitted to the noisy one-way marginals; adding or removing a row moves
      one count by 1, so each score has sensitivity 1. The exponential mechanism with parameter ε
      is ε²/8-zCDP (Cesar & Rogers 2021) and ε is rounded down so the charge is an upper bound.
    * ρ/3 over the d − 1 selected two-way marginals (ρ/(3(d − 1)) each, as above).
    Composition gives exactly ρ. Compression, estimation and sampling are post-processing.

    Deviations from the reference implementation (private-pgm's mechanisms/mst.py): noise is the
    exact discrete Gaussian from the OS CSPRNG rather than a floating-point Gaussian; the
    exponential mechanism draws from the CSPRNG; budgets are split in exact fractions; merged
    values are decompressed in proportion to their noisy counts rather than uniformly; the merged
    cell of a compressed one-way marginal is weighted like the others in estimation (the
    reference down-weights it by √k; this changes only the fit, not the privacy); synthetic rows
    use controlled rounding by default. With a single attribute the whole ρ measures it.
    """

    name = "mst"
    description = (
        "MST (McKenna, Miklau, Sheldon 2021): noisy one-way marginals, a spanning tree of "
        "two-way marginals chosen with the exponential mechanism, a graphical model fitted to "
        "them. Fast; keeps the strongest pairwise correlations."
    )
    Params = MSTParams
    resamplable = True
    milestones = (
        Milestone("measure_one_way", 0.0),
        Milestone("select_pairs", 0.1),
        Milestone("measure_pairs", 0.3),
        Milestone("estimate", 0.35),
        Milestone("sample", 0.9),
    )

    def smallest_release_rho(self, domain: Domain, params: BaseModel, rho: Fraction) -> Fraction:
        """ρ/(3d) per one-way marginal (ρ with one column); the d − 1 selections and pairs get
        more each."""
        return rho if len(domain) < 2 else rho / (3 * len(domain))

    def estimate_resources(self, domain: Domain, params: BaseModel, rows: int) -> ResourceEstimate:
        """A tree of d − 1 pairs (each at most the largest pair) plus the one-ways as the model;
        every pair's true counts and 1-way-model estimate held at once for the selection."""
        if not isinstance(params, MSTParams):
            raise TypeError("params must be MSTParams")
        one_ways = sum(domain.sizes)
        tree = one_ways + max(len(domain) - 1, 0) * largest_cells(domain, 2)
        return resource_estimate(
            domain,
            rows,
            model_cells=tree,
            fit_iterations=params.iterations,
            table_cells=marginal_cells(domain, 2) - one_ways,
            extra_work=params.selection_iterations * one_ways,
            output=GRAPHICAL_OUTPUT,
        )

    def first_noise(
        self, domain: Domain, params: BaseModel, rho: Fraction
    ) -> tuple[NoisePreview, ...]:
        """The one-way marginal of every column, at a third of ρ (all of it with one column)
        split equally."""
        del params
        d = len(domain)
        one_way_rho = budget_split(d, rho)[0]
        return one_way_previews(domain.attributes, [one_way_rho / d] * d)

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
        assert isinstance(params, MSTParams)
        domain = data.domain
        attributes = list(domain.attributes)
        d = len(attributes)
        edges_needed = d - 1
        one_way_rho, select_rho, two_way_rho = budget_split(d, rho)

        progress.milestone("measure_one_way")
        progress(0.0, "measure")
        one_way_each = one_way_rho / d
        one_way: list[Measurement] = []
        for i, attr in enumerate(attributes):
            one_way.append(measure_marginal(data, [attr], one_way_each, noise_source))
            progress(0.1 * (i + 1) / d, "measure")
        compression, small_data, noisy_one_way = compress_after_one_ways(
            data, one_way, params.compress
        )
        small = compression.domain

        selections: list[SelectionCharge] = []
        two_way: list[Measurement] = []
        if edges_needed:
            progress.milestone("select_pairs")
            progress(0.1, "select")
            first = estimate(
                small,
                noisy_one_way,
                iterations=params.selection_iterations,
                callback=estimation_progress(progress, 0.1, 0.2, params.selection_iterations),
            )
            pairs = list(itertools.combinations(attributes, 2))
            estimates = first.project_many(pairs)
            # L1 errors of the 1-way model on every pair: sensitivity 1 each.
            # All pairs in one request (one GROUPING SETS scan per batch on DuckDB and Spark).
            errors = {
                pair: float(np.abs(table - est).sum())
                for pair, table, est in zip(
                    pairs, count_marginals(small_data, pairs), estimates, strict=True
                )
            }
            step_rho = select_rho / edges_needed
            epsilon = epsilon_for_rho(step_rho)
            forest = _UnionFind(attributes)
            chosen: list[tuple[str, str]] = []
            for step in range(edges_needed):
                candidates = [p for p in pairs if forest.find(p[0]) != forest.find(p[1])]
                scores = np.array([errors[p] for p in candidates])
                pick = candidates[exponential_mechanism(scores, epsilon, 1.0, source=noise_source)]
                forest.union(*pick)
                chosen.append(pick)
                selections.append(
                    SelectionCharge(
                        description=f"MST edge {step + 1}/{edges_needed}",
                        epsilon=epsilon,
                        sensitivity=1.0,
                        rho=step_rho,
                    )
                )
                progress(0.2 + 0.1 * (step + 1) / edges_needed, "select")

            progress.milestone("measure_pairs")
            progress(0.3, "measure")
            two_way_each = two_way_rho / edges_needed
            for i, pair in enumerate(chosen):
                two_way.append(measure_marginal(small_data, list(pair), two_way_each, noise_source))
                progress(0.3 + 0.05 * (i + 1) / edges_needed, "measure")

        progress.milestone("estimate")
        progress(0.35, "estimate")
        model = estimate(
            small,
            noisy_one_way + [NoisyMarginal.from_measurement(m) for m in two_way],
            iterations=params.iterations,
            callback=estimation_progress(progress, 0.35, 0.9, params.iterations),
        )
        progress.milestone("sample")
        progress(0.9, "sample")
        n_out = resolve_rows(rows, model.total, max_rows)
        fitted = graphical_fitted_model(self.name, model, compression, params.synthesis)
        codes = fitted.sample(n_out, rng)
        progress(1.0, "sample")
        measurements = tuple(one_way + two_way)
        return SynthesisResult(
            codes=codes,
            measurements=measurements,
            rho_used=sum((m.rho for m in measurements), Fraction(0))
            + sum((s.rho for s in selections), Fraction(0)),
            estimated_total=float(model.total),
            selections=tuple(selections),
            axis_maps=measured_axis_maps(compression, measurements, d),
            model=fitted,
            extra=graphical_extra(model),
        )
