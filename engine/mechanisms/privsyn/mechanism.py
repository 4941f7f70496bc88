"""PrivSyn: differentially private data synthesis with dense marginals and GUM (Zhang, Wang, Li,
He, Chen, Zhang, USENIX Security 2021)."""

from __future__ import annotations

import dataclasses
import itertools
import math
import random
from fractions import Fraction
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from engine.accounting import exact_share, gaussian_rho, sigma2_for_rho, split_rho
from engine.counting import CountingEngine
from engine.domain import Domain
from engine.marginals import (
    MARGINAL_SENSITIVITY,
    Measurement,
    count_marginal,
    count_marginals,
    measure_marginal,
)
from engine.mechanisms.base import (
    SAMPLING_WORK_PER_CELL,
    GaussianCharge,
    Mechanism,
    Milestone,
    ProgressReporter,
    ResourceEstimate,
    SynthesisResult,
    largest_cells,
    marginal_cells,
    resolve_rows,
    resource_estimate,
)
from engine.mechanisms.preview import NoisePreview, one_way_previews
from engine.mechanisms.privsyn.parts import (
    INDIF_SENSITIVITY,
    FloatArray,
    IntArray,
    NoisyTable,
    coarse_shape,
    coarsen,
    combine_marginals,
    connect_isolated,
    frequency_groups,
    greedy_select,
    indif_floor,
    make_consistent,
    refine_coarse,
)
from engine.mechanisms.splits import one_way_parts, size_weight
from engine.models.compression import Compression, measured_axis_maps, recode
from engine.models.fitted import FittedModel
from engine.models.gum import GUMSettings
from engine.models.kinds import GUMModel
from engine.noise import discrete_gaussian_noise


def first_budget_split(
    columns: int, params: PrivSynParams, rho: Fraction
) -> tuple[Fraction, Fraction]:
    """ρ → (one-way marginals, InDif scores): their shares of ρ, or all of ρ to the one-ways
    when there is no pair of columns; the marginals get the rest."""
    if columns < 2:
        return rho, Fraction(0)
    one_way_rho, indif_rho, _ = split_rho(
        rho,
        [
            exact_share(params.one_way_share),
            exact_share(params.indif_share),
            1 - exact_share(params.one_way_share) - exact_share(params.indif_share),
        ],
    )
    return one_way_rho, indif_rho


def _finer(current: IntArray, counts: FloatArray, groups: int) -> IntArray:
    """The finer of an attribute's existing coarse grouping and one with ``groups`` groups."""
    if int(current.max()) + 1 >= groups:
        return current
    return frequency_groups(counts, groups)


def _coarse_candidates(
    phi: FloatArray,
    pairs: list[tuple[int, int]],
    sizes: tuple[int, ...] | list[int],
    chosen: set[int],
    count: int,
    max_cells: int,
    rho: float,
    gain: float,
) -> list[tuple[int, int]]:
    """Up to ``count`` unselected pairs with more than ``max_cells`` cells, highest noisy InDif
    first, each kept only while it passes the greedy's test with a discount: ``gain``·φ must
    exceed the rise of Ψ (the selection's expected L1 noise at ``rho``) from adding a
    ``max_cells``-cell table (post-processing of released scores)."""
    scale = 1.0 / math.sqrt(math.pi * rho)
    weight = float(sum((sizes[pairs[i][0]] * sizes[pairs[i][1]]) ** (2 / 3) for i in chosen))
    extra = max_cells ** (2 / 3)
    order = np.argsort(-phi, kind="stable").tolist()
    out: list[tuple[int, int]] = []
    for i in order:
        a, b = pairs[i]
        if len(out) >= count or phi[i] <= 0:
            break
        if i in chosen or sizes[a] * sizes[b] <= max_cells:
            continue
        rise = ((weight + extra) ** 1.5 - weight**1.5) * scale
        if gain > 0 and gain * float(phi[i]) <= rise:
            break
        out.append((a, b))
        weight += extra
    return out


class PrivSynParams(BaseModel):
    """Parameters of PrivSyn (see PrivSynMechanism for the defaults' sources)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    one_way_share: float = Field(
        default=0.25, gt=0, lt=1, description="share of ρ for the noisy one-way marginals"
    )
    indif_share: float = Field(
        default=0.1,
        gt=0,
        lt=1,
        description="share of ρ for the noisy InDif scores; the rest measures the selected "
        "marginals",
    )
    indif_grid: int = Field(
        default=1,
        ge=1,
        le=1024,
        description="k: InDif is released as ⌊k·InDif⌋ (sensitivity 4k) on this public grid",
    )
    compress: bool = Field(
        default=True,
        description="merge values whose noisy one-way count is below compress_sigmas·σ into "
        "one code (PrivSyn's filter-and-merge)",
    )
    compress_sigmas: float = Field(
        default=3.0, ge=0, le=100, description="the merge threshold in σ of each one-way count"
    )
    greedy_tolerance: float = Field(
        default=0.0,
        ge=0,
        le=1e12,
        description="stop the greedy selection when a pair lowers the error by at most this "
        "(counts); 0 is the paper's 'stop when nothing improves'",
    )
    isolated: Literal["connect", "independent"] = Field(
        default="independent",
        description="an attribute no selected pair covers: link it by its highest-scoring pair "
        "('connect') or generate it from its one-way marginal ('independent')",
    )
    max_clique_cells: int = Field(
        default=200,
        ge=1,
        le=10**7,
        description="γ: combine selected pairs into cliques with fewer cells than this",
    )
    max_clique_size: int = Field(
        default=4, ge=2, le=8, description="largest clique the combination step builds"
    )
    coarse_pairs: int = Field(
        default=6,
        ge=0,
        le=10_000,
        description="also measure this many unselected pairs (highest noisy InDif first, more "
        "than coarse_cells cells) on a public coarse grouping of their values",
    )
    coarse_cells: int = Field(
        default=100,
        ge=4,
        le=10**6,
        description="largest number of cells of a coarse pair measurement",
    )
    coarse_gain: float = Field(
        default=1.0,
        ge=0,
        le=1,
        description="share of a pair's noisy InDif a coarse measurement is assumed to recover "
        "(a coarse pair is measured only while this beats its added noise); 0 takes the "
        "coarse_pairs highest-scoring pairs unconditionally",
    )
    coarse_selected_above: int = Field(
        default=200,
        ge=0,
        le=10**7,
        description="a selected pair left outside the cliques with more cells than this is "
        "measured on a coarse grouping (at most coarse_cells cells) instead; 0 turns this off",
    )
    consistency_rounds: int = Field(
        default=500, ge=1, le=100_000, description="cap on consistency/Norm-Sub rounds"
    )
    iterations: int = Field(default=50, ge=0, le=10_000, description="GUM iterations T")
    gum_order: Literal["error", "cells"] = Field(
        default="cells",
        description="GUM's visiting order in each iteration: descending error at the previous "
        "update (reference code) or descending number of cells (small precise tables last)",
    )
    alpha0: float = Field(default=1.0, gt=0, le=1, description="GUM's first step size α₀")
    alpha_decay: float = Field(
        default=0.84, gt=0, le=1, description="α is multiplied by this every alpha_step iterations"
    )
    alpha_step: int = Field(default=20, ge=1, le=10_000, description="iterations per α step")
    duplication_even: float = Field(
        default=0.3,
        ge=0,
        le=1,
        description="share of an under-represented cell's new records made by duplication "
        "(the rest by replacement) on even iterations (reference code: 0.5)",
    )
    duplication_odd: float = Field(
        default=0.3,
        ge=0,
        le=1,
        description="the same on odd iterations (reference code: 1.0)",
    )
    append: bool = Field(
        default=True,
        description="attribute appending: attributes in exactly one pair are filled from it "
        "after GUM instead of taking part",
    )
    tree_init: bool = Field(
        default=True,
        description="start GUM from rows drawn along a maximum spanning tree of the marginals "
        "(each column from its noisy conditional on its parent) instead of independent columns",
    )
    separate: bool = Field(
        default=True,
        description="separate-and-join: run GUM per connected component of the marginals",
    )

    @model_validator(mode="after")
    def _shares_leave_room(self) -> PrivSynParams:
        if exact_share(self.one_way_share) + exact_share(self.indif_share) >= 1:  # exact decimals
            raise ValueError("one_way_share + indif_share must be below 1")
        return self


def _gum_targets(columns: int, params: PrivSynParams) -> int:
    """The most marginals GUM updates the records towards: every pair and the coarse pairs."""
    return columns * (columns - 1) // 2 + params.coarse_pairs


class PrivSynMechanism(Mechanism):
    """Noisy one-way marginals, DenseMarg selection of many two-way marginals by noisy InDif,
    their combination into small cliques, measurement, consistency, and GUM record synthesis.

    Per privacy unit (at most k rows after truncation; ``run(..., contribution_bound=k)``): the
    run below is made at the row-level budget ρ/k² and each release is stated with sensitivity
    k·Δ and ρ k²·ρ_i, σ² unchanged, so the charges add up to ρ per unit (engine/privacy_unit/
    group.py: k rows move a statistic of per-row sensitivity Δ by at most kΔ; for a count k is
    attained, all of a unit's rows in one cell, so no tighter bound holds). InDif:
    per row 4g, per unit 4gk.

    Privacy (add/remove one row, ρ-zCDP). ρ is split exactly (``split_rho``) into
    ρ₁ = ``one_way_share``·ρ, ρ₂ = ``indif_share``·ρ and ρ₃ = ρ − ρ₁ − ρ₂.
    * One-way marginals: ρ₁ split over the d attributes ∝ c^(2/3) (c = domain size); each is the
      attribute's histogram (L2 sensitivity 1) with discrete Gaussian noise σ_i² = 1/(2ρ_i)
      (``measure_marginal``; CKS 2020). Filter-and-merge (values below θ_i = 3σ_i share a code)
      is a public function of these noisy counts, so everything after runs on a public re-coding.
    * InDif: for each of the m = d(d−1)/2 pairs the score InDif = Σ|M_ab − M_a M_bᵀ/n| on the
      re-coded data (true n inside the score) changes by at most 4 under add/remove (notes §0.3;
      property-tested). It is released as the integer ⌊k·InDif⌋ (k = ``indif_grid``), computed
      exactly in integers (n·InDif is an integer), which changes by at most 4k. Each score gets
      independent N_Z(0, σ²) noise, σ² = (4k)²·m/(2ρ₂), from the CSPRNG and is recorded as its
      own ``GaussianCharge`` (sensitivity 4k, sigma2 σ², ρ₂/m each). The m charges sum to
      exactly ρ₂, which is also the ρ of the L2 argument for the whole vector (sensitivity
      4k·√m, (4k)²m/(2σ²) = ρ₂); one charge per coordinate keeps every recorded sensitivity
      and σ² literally true and exact.
    * Selected marginals: ρ₃ split over them ∝ c^(2/3), each measured with
      ``measure_marginal`` (sensitivity 1, σ_i² = 1/(2ρ_i)). If nothing is selected (e.g.
      ``isolated="independent"`` and the greedy keeps no pair), ρ₃ re-measures the
      one-way marginals of the re-coded data, so the budget is always spent exactly.
    * Coarse pair measurements: each is the histogram of a pair on a grouping of its values
      (sensitivity 1 under add/remove: one row moves one cell by 1), with discrete Gaussian
      noise σ² = 1/(2ρ_i), ρ_i from the same ρ₃ split ∝ cells^(2/3), recorded as a
      ``GaussianCharge``. Which pairs, and the groupings (runs of consecutive codes with about
      equal mass under the noisy one-way counts), are functions of released values only.
    With d = 1 there are no pairs and the whole ρ measures the one attribute. Greedy selection,
    combination, consistency, GUM (seeded ``rng``) and decoding are post-processing; the row
    count is the common total of the consistent noisy marginals.

    Deviations from the paper and the notes (notes-ppsyn_privsyn.md, "the notes"):
    * exact discrete Gaussian noise from the CSPRNG everywhere; InDif released on an integer grid;
      add/remove neighbours throughout; budgets in exact fractions;
    * one-way budget ∝ c^(2/3) (the notes' [R]; the reference code splits it equally);
    * filter-and-merge always keeps the merged code, even when its noisy sum is below θ (the
      paper then drops those values); consistency and GUM give it the mass its noisy
      marginals support. Merged codes are decoded ∝ the clipped noisy one-way counts;
    * consistency weights treat every cell of a marginal as having that marginal's σ² (the
      merged cell of a re-coded one-way marginal sums several noisy cells); Norm-Sub only (no
      Norm-Cut phase); stops when a consistency step leaves no cell below −1e-7·N;
    * GUM: stochastic (unbiased) rounding of the per-cell changes; marginals are visited in
      descending order of their error at their previous update (the reference recomputes all
      errors first); separate-and-join on (off in the reference code; on adult, off raised the
      3-way TVD from 0.10 to 0.12 because duplication copied the uncovered columns too);
    * GUM starts from rows drawn along a maximum spanning forest of the selected marginals
      (weights: InDif of the consistent tables), each column from its conditional on its
      parent, instead of independent columns (``tree_init``; on adult 3-way 0.101 → 0.098);
    * GUM frees, from each over-represented cell, a cyclic run of rows starting at a random
      position, with all rows shuffled once per iteration (not a fresh random subset per
      update: 6× faster on temporal-match2);
    * clique enumeration is capped at ``max_clique_size`` attributes;
    * coarse pair measurements (not in the paper). On adult most of the remaining error was in
      large dependent pairs the greedy cannot afford at full resolution (age × hours-per-week,
      2000 cells), and admitting more full pairs made things worse. So, after the greedy, up to
      ``coarse_pairs`` = 6 unselected pairs with more than ``coarse_cells`` = 100 cells, highest
      noisy InDif first, are measured on a public coarse grouping (≤ 100 cells) while
      ``coarse_gain``·φ exceeds the rise in the greedy's Ψ from one more 100-cell table; and
      every selected pair left outside the cliques with more than ``coarse_selected_above`` =
      200 cells is measured coarse instead of in full. A coarse table is Norm-Sub'ed, raked to
      the consistent one-way marginals' group totals, spread inside each pair of groups ∝ the
      one-way marginals, and given to GUM as a fine target (it takes no part in consistency).
      On adult at ε = 1 (medians of 3–7 runs, 3-way TVD): 0.087 → 0.082 with 6 coarse
      unselected pairs of ≤ 100 cells (10 pairs at 64 cells: 0.090; 5 pairs at 150 cells:
      0.084); with the cells order below, 0.081 → 0.079 from also measuring the large
      selected pairs coarse;
    * GUM visits the marginals in descending order of cells (``gum_order="cells"``), so the
      small precise tables are matched last in each iteration. With the error order, noisy
      age × marital-status and age × relationship tables kept GUM from matching
      marital-status × relationship (42 cells, TVD 0.086 to its target vs 0.010 with this order);
      on adult, with 6 coarse pairs, 3-way 0.083 → 0.079 (7 runs); nltcs 0.0081 → 0.0076.
    Defaults tuned on adult at ε = 1, δ = 1e-9 (mean of 3–4 runs each, 2-/3-way TVD; the
    notes' defaults gave 0.047/0.107) and checked on temporal-match2: ``isolated="independent"``
    (connecting isolated attributes linked fnlwgt to age through an 8500-cell table measured at
    TVD 0.19), γ = ``max_clique_cells`` = 200 instead of 5000 (5000-cell cliques got TVD up to
    0.2 of noise), ``one_way_share`` = 0.25 instead of 0.1 (0.2 → 0.25: adult ε = 0.1 went from
    0.125/0.202 to 0.115/0.188; ε = 1 unchanged within noise), and a duplication share of 0.3 on
    every iteration instead of 0.5/1.0. Duplication copies whole rows: on adult, with few
    marginals, much of it distorted the pairs no marginal covers (0.1–0.3 were best); on
    temporal-match2, with ~280 marginals, 0.1 left GUM unconverged (2-way 0.037 vs 0.027 at 0.3
    or 0.5/1.0). Together with the coarse pairs and the cells order, adult: about 0.034/0.080
    (medians over runs; see docs/methods.md). Tried without gain on adult: more GUM iterations
    (100–200), other α schedules, duplication 0.1/0.5/(0.3, 1.0), one_way_share 0.1/0.15/0.3,
    indif_share 0.05, compress_sigmas 2/4, γ = 500/1000, coarse_cells 36/64/144, more than 6
    coarse pairs, removing ∝ excess instead of ∝ count in GUM, and scaling the greedy's noise
    model down (admitting more full pairs: 3-way 0.086–0.097).
    """

    name = "privsyn"
    description = (
        "PrivSyn (Zhang et al. 2021): many noisy two-way marginals chosen by a noisy dependency "
        "score (InDif), merged into small cliques, made consistent, and matched by gradually "
        "updating a synthetic table (GUM). No graphical model; scales to wide tables."
    )
    Params = PrivSynParams
    resamplable = True
    milestones = (
        Milestone("measure_one_way", 0.0),
        Milestone("dependency_scores", 0.05),
        Milestone("measure_selected", 0.1),
        Milestone("consistency", 0.15),
        Milestone("sample", 0.2),
    )

    def smallest_release_rho(self, domain: Domain, params: BaseModel, rho: Fraction) -> Fraction:
        """Per release, ρ/Δ²: the smallest one-way part, an InDif score ρ₂/(m·(4k)²), and a
        marginal's part of ρ₃ ∝ cells^(2/3) over at most 2m + d + coarse_pairs tables of at
        most max(largest pair, max_clique_cells, coarse_cells) cells."""
        if not isinstance(params, PrivSynParams):
            raise TypeError("params must be PrivSynParams")
        d = len(domain)
        m = d * (d - 1) // 2
        if not m:
            return rho
        one_way_share = exact_share(params.one_way_share)
        indif_share = exact_share(params.indif_share)
        weights = [size_weight(size) for size in domain.sizes]
        one_way = one_way_share * rho * min(weights) / sum(weights)
        indif = indif_share * rho / (m * (INDIF_SENSITIVITY * params.indif_grid) ** 2)
        widest = max(largest_cells(domain, 2), params.max_clique_cells, params.coarse_cells)
        tables = 2 * m + d + params.coarse_pairs
        marginal = (1 - one_way_share - indif_share) * rho / (tables * size_weight(widest))
        return min(one_way, indif, marginal)

    def estimate_resources(self, domain: Domain, params: BaseModel, rows: int) -> ResourceEstimate:
        """No model: every pair's table (InDif scores, measured pairs) and the cliques (fewer
        than ``max_clique_cells`` each, at most one per three pairs) and coarse pairs held at
        once; GUM touches every record once per target and iteration."""
        if not isinstance(params, PrivSynParams):
            raise TypeError("params must be PrivSynParams")
        d = len(domain)
        pairs = d * (d - 1) // 2
        tables = (
            marginal_cells(domain, 2)
            + (pairs // 3) * params.max_clique_cells
            + params.coarse_pairs * params.coarse_cells
        )
        targets = _gum_targets(d, params)
        return resource_estimate(
            domain,
            rows,
            table_cells=tables,
            extra_work=params.consistency_rounds * tables
            + params.iterations * (targets * rows + tables),
        )

    def sampling_work(self, domain: Domain, params: BaseModel, rows: int) -> int:
        """A sample re-runs GUM on the new rows: every record once per target and iteration
        (measured 5.5–8.1 µs per output cell on adult with the default 50 iterations, against
        the 3.5 µs this gives at WORK_UNITS_PER_SECOND)."""
        if not isinstance(params, PrivSynParams):
            raise TypeError("params must be PrivSynParams")
        d = len(domain)
        return (
            params.iterations * _gum_targets(d, params) * rows + SAMPLING_WORK_PER_CELL * rows * d
        )

    def first_noise(
        self, domain: Domain, params: BaseModel, rho: Fraction
    ) -> tuple[NoisePreview, ...]:
        """The one-way marginal of every column (:func:`first_budget_split`, ∝ size^(2/3))."""
        if not isinstance(params, PrivSynParams):
            raise TypeError("params must be PrivSynParams")
        one_way_rho = first_budget_split(len(domain), params, rho)[0]
        return one_way_previews(domain.attributes, one_way_parts(domain, one_way_rho))

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
        assert isinstance(params, PrivSynParams)
        original = data.domain
        attributes = list(original.attributes)
        d = len(attributes)
        pairs = list(itertools.combinations(range(d), 2))
        m = len(pairs)
        one_way_rho, indif_rho = first_budget_split(d, params, rho)
        marginal_rho = rho - one_way_rho - indif_rho

        # 1. Noisy one-way marginals, ρ₁ ∝ c^(2/3); filter and merge (post-processing).
        progress.milestone("measure_one_way")
        progress(0.0, "measure")
        one_way_rhos = one_way_parts(original, one_way_rho)
        one_way: list[Measurement] = []
        for j, (attr, part) in enumerate(zip(attributes, one_way_rhos, strict=True)):
            one_way.append(measure_marginal(data, [attr], part, noise_source))
            progress(0.04 * (j + 1) / d, "measure")
        sigmas = [math.sqrt(float(mm.sigma2)) for mm in one_way]
        counts = [mm.noisy_counts for mm in one_way]
        compression = (
            Compression.from_noisy_counts(original, counts, sigmas, params.compress_sigmas)
            if params.compress
            else Compression.identity(original, counts)
        )
        domain = compression.domain
        sizes = domain.sizes
        compressed_counts = [compression.compress_counts(j, c) for j, c in enumerate(counts)]
        # In memory for a Dataset, inside the query for DuckDB/Spark: the same exact tables.
        small = recode(data, compression)

        # 2. DenseMarg: noisy InDif, greedy selection, isolated attributes, combination.
        progress.milestone("dependency_scores")
        progress(0.05, "select")
        releases: list[GaussianCharge] = []
        selected_sets: list[tuple[int, ...]] = []
        coarse: list[tuple[int, int]] = []
        if m:
            k = params.indif_grid
            sensitivity = Fraction(INDIF_SENSITIVITY * k)
            sigma2 = sensitivity**2 * m / (2 * indif_rho)
            # Every pair in one request (GROUPING SETS batches on DuckDB and Spark).
            pair_names = [(attributes[a], attributes[b]) for a, b in pairs]
            floored = np.array(
                [indif_floor(table, k) for table in count_marginals(small, pair_names)],
                dtype=np.int64,
            )
            noisy_scores = floored + discrete_gaussian_noise(sigma2, (m,), noise_source)
            releases = [
                GaussianCharge(
                    description=f"PrivSyn InDif score of ({attributes[a]}, {attributes[b]})",
                    sensitivity=sensitivity,
                    sigma2=sigma2,
                    rho=indif_rho / m,
                )
                for a, b in pairs
            ]
            phi = noisy_scores.astype(np.float64) / k
            cells = [sizes[a] * sizes[b] for a, b in pairs]
            chosen = greedy_select(phi, cells, float(marginal_rho), params.greedy_tolerance)
            if params.isolated == "connect":
                chosen = connect_isolated(d, pairs, phi.tolist(), chosen)
            selected_sets = combine_marginals(
                sizes,
                [pairs[i] for i in chosen],
                params.max_clique_cells,
                params.max_clique_size,
            )
            if params.coarse_pairs:
                coarse = _coarse_candidates(
                    phi,
                    pairs,
                    sizes,
                    set(chosen),
                    params.coarse_pairs,
                    params.coarse_cells,
                    float(marginal_rho),
                    params.coarse_gain,
                )
            limit = params.coarse_selected_above
            if limit:
                big = [
                    s for s in selected_sets if len(s) == 2 and sizes[s[0]] * sizes[s[1]] > limit
                ]
                selected_sets = [s for s in selected_sets if s not in big]
                coarse = [(s[0], s[1]) for s in big] + coarse
        progress(0.1, "select")

        # 3. Measure the selected marginals, ρ₃ ∝ c^(2/3) (or the one-way ones again).
        progress.milestone("measure_selected")
        progress(0.1, "measure")
        if not selected_sets and marginal_rho > 0:
            selected_sets = [(j,) for j in range(d)]
        set_cells = [math.prod(sizes[a] for a in s) for s in selected_sets]
        # Coarse groupings: a public function of the noisy one-way counts (post-processing).
        groupings: dict[int, IntArray] = {}
        coarse_cells: list[int] = []
        for a, b in coarse:
            g_a, g_b = coarse_shape(sizes[a], sizes[b], params.coarse_cells)
            groupings.setdefault(a, frequency_groups(compressed_counts[a], g_a))
            groupings[a] = _finer(groupings[a], compressed_counts[a], g_a)
            groupings.setdefault(b, frequency_groups(compressed_counts[b], g_b))
            groupings[b] = _finer(groupings[b], compressed_counts[b], g_b)
        for a, b in coarse:
            coarse_cells.append(int(groupings[a].max() + 1) * int(groupings[b].max() + 1))
        all_cells = set_cells + coarse_cells
        parts = split_rho(marginal_rho, [size_weight(c) for c in all_cells]) if all_cells else ()
        measured: list[Measurement] = []
        for i, (attr_set, part) in enumerate(zip(selected_sets, parts, strict=False)):
            names = [attributes[a] for a in attr_set]
            measured.append(measure_marginal(small, names, part, noise_source))
            progress(0.1 + 0.05 * (i + 1) / len(all_cells), "measure")
        coarse_noisy: list[FloatArray] = []
        for (a, b), part in zip(coarse, parts[len(selected_sets) :], strict=True):
            exact = coarsen(
                count_marginal(small, (attributes[a], attributes[b])), groupings[a], groupings[b]
            ).astype(np.int64)
            c_sigma2 = sigma2_for_rho(MARGINAL_SENSITIVITY, part)
            coarse_noisy.append(
                (exact + discrete_gaussian_noise(c_sigma2, exact.shape, noise_source)).astype(
                    np.float64
                )
            )
            releases.append(
                GaussianCharge(
                    description=f"PrivSyn coarse marginal of ({attributes[a]}, {attributes[b]})",
                    sensitivity=MARGINAL_SENSITIVITY,
                    sigma2=c_sigma2,
                    rho=gaussian_rho(MARGINAL_SENSITIVITY, c_sigma2),
                )
            )

        # 4. Consistency (post-processing).
        progress.milestone("consistency")
        progress(0.15, "estimate")
        tables = [
            NoisyTable((j,), compression.compress_counts(j, mm.noisy_counts), float(mm.sigma2))
            for j, mm in enumerate(one_way)
        ] + [
            NoisyTable(s, mm.noisy_counts.astype(np.float64), float(mm.sigma2))
            for s, mm in zip(selected_sets, measured, strict=True)
        ]
        rounds = params.consistency_rounds
        consistent, total = make_consistent(
            tables,
            rounds,
            callback=lambda r: progress(0.15 + 0.05 * (r + 1) / rounds, "estimate"),
        )
        progress(0.2, "estimate")

        # 5. GUM (post-processing, seeded rng), then decode merged values.
        progress.milestone("sample")
        progress(0.2, "sample")
        n_out = resolve_rows(rows, total, max_rows)
        targets = [
            (s, table)
            for s, table in zip(selected_sets, consistent[d:], strict=True)
            if len(s) >= 2
        ] + [
            (
                (a, b),
                refine_coarse(noisy, groupings[a], groupings[b], consistent[a], consistent[b]),
            )
            for (a, b), noisy in zip(coarse, coarse_noisy, strict=True)
        ]
        settings = GUMSettings(
            iterations=params.iterations,
            alpha0=params.alpha0,
            alpha_decay=params.alpha_decay,
            alpha_step=params.alpha_step,
            duplication_even=params.duplication_even,
            duplication_odd=params.duplication_odd,
            append=params.append,
            separate=params.separate,
            tree_init=params.tree_init,
            order=params.gum_order,
        )
        gum = GUMModel(
            compression=compression,
            one_way=tuple(consistent[:d]),
            targets=tuple(targets),
            settings=dataclasses.asdict(settings),
        )
        model = FittedModel(method=self.name, domain=original, estimated_total=total, body=gum)
        codes = gum.synthesize(n_out, rng, callback=lambda f: progress(0.2 + 0.75 * f, "sample"))
        progress(1.0, "sample")
        measurements = tuple(one_way + measured)
        return SynthesisResult(
            codes=codes,
            measurements=measurements,
            rho_used=sum((mm.rho for mm in measurements), Fraction(0))
            + sum((r.rho for r in releases), Fraction(0)),
            estimated_total=total,
            releases=tuple(releases),
            axis_maps=measured_axis_maps(compression, measurements, d),
            model=model,
            extra={"cliques": [[attributes[a] for a in s] for s in selected_sets]},
        )
