"""PrivMRF: data synthesis via differentially private Markov random fields (Cai, Lei, Wei, Xiao,
PVLDB 14(11): 2190-2202, 2021)."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from engine.accounting import exact_share, sigma2_for_rho
from engine.counting import CountingEngine
from engine.domain import Domain
from engine.estimation import (
    GraphicalModel,
    ModelSizer,
    NoisyMarginal,
    estimate,
    estimate_total,
)
from engine.estimation.growth import Memo, TreeGrowth
from engine.marginals import (
    FLAT_CACHE_BYTES,
    MARGINAL_SENSITIVITY,
    MarginalCache,
    Measurement,
    count_marginal,
    count_marginals,
    measure_marginal,
)
from engine.mechanisms.aim.mechanism import _fits_in, check_one_way_model, grown_structure
from engine.mechanisms.base import (
    GRAPHICAL_OUTPUT,
    GaussianCharge,
    Mechanism,
    Milestone,
    ProgressReporter,
    ResourceEstimate,
    SynthesisResult,
    largest_cells,
    marginal_cells,
    resource_estimate,
)
from engine.mechanisms.fitting import estimation_progress, fit_and_sample
from engine.mechanisms.ppsyn.partition import NOISE_L1
from engine.mechanisms.preview import NoisePreview, one_way_previews
from engine.mechanisms.privmrf.parts import (
    R_SCORE_SENSITIVITY,
    SELECTION_SENSITIVITY,
    Clique,
    all_pairs,
    attribute_graph,
    candidate_marginals,
    drop_independent,
    initial_marginals,
    prune_subsumed,
    r_score_floor,
    selection_score,
    subsumed,
    useful_cells,
)
from engine.mechanisms.splits import one_way_parts, size_weight
from engine.models.compression import (
    Compression,
    compress_after_one_ways,
    measured_axis_maps,
)
from engine.noise import SecureRandom, discrete_gaussian_noise

ANSWER_CACHE_CELLS = 200_000


def r_score_noise(pairs: int, grid: int, rho_r: Fraction) -> tuple[Fraction, Fraction]:
    """(sensitivity, σ²) of each of the ``pairs`` noisy R-scores on the ``grid`` (integer units)
    that share ``rho_r``: each score has sensitivity Δ = ``R_SCORE_SENSITIVITY``·grid and gets
    σ² = Δ²·pairs/(2·rho_r), so each costs rho_r/pairs."""
    sensitivity = Fraction(R_SCORE_SENSITIVITY * grid)
    return sensitivity, sensitivity**2 * pairs / (2 * rho_r)


LOCAL_GRAPH_COLUMNS = 64
"""``graph_growth="auto"`` triangulates the whole attribute graph for every pair Alg. 1 tries up
to this many columns and grows it locally beyond. The pairs number d(d − 1)/2 and each whole
triangulation costs about d² steps: loans' 54 columns (1,431 pairs) take about 1 s of a 27–44 s
run, the 196-column table's 19,110 pairs took minutes (99 % of the first 10 minutes of a run,
docs/benchmarks.md, "`ppsyn` and `privmrf` on wide tables"). 64 is AIM's width for batches."""


def graph_growth(domain: Domain, params: PrivMRFParams) -> Literal["exact", "local"]:
    """Alg. 1's growth: ``params.graph_growth``, with 'auto' resolved by the public column
    count (:data:`LOCAL_GRAPH_COLUMNS`)."""
    if params.graph_growth != "auto":
        return params.graph_growth
    return "exact" if len(domain) <= LOCAL_GRAPH_COLUMNS else "local"


class PrivMRFParams(BaseModel):
    """Parameters of PrivMRF (see PrivMRFMechanism for the defaults and deviations)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    r_share: float = Field(
        default=0.1, gt=0, lt=1, description="share of ρ for the noisy pairwise R-scores (Alg. 1)"
    )
    selection_share: float = Field(
        default=0.1,
        gt=0,
        lt=1,
        description="share of ρ for the noisy selection scores of the refinement rounds (Alg. 4)",
    )
    total_share: float = Field(
        default=0.01,
        gt=0,
        lt=1,
        description="share of ρ for the noisy row count ñ used by the usefulness test (Alg. 2), "
        "only when compress is false (otherwise ñ is the one-way marginals' noisy total); the "
        "rest measures the d' + t marginals",
    )
    compress: bool = Field(
        default=True,
        description="first measure the one-way marginals (one_way_share of ρ, ∝ size^(2/3)) and "
        "merge values whose noisy count is below compress_sigmas·σ into one code (as MST/AIM); "
        "not in the paper",
    )
    one_way_share: float = Field(
        default=0.15, gt=0, lt=1, description="share of ρ for the one-way marginals (compress)"
    )
    compress_sigmas: float = Field(
        default=3.0, ge=0, le=100, description="merge threshold in σ of each one-way count"
    )
    max_clique_cells: int = Field(
        default=100_000,
        ge=1,
        le=10**7,
        description="τ_c: largest maximal clique (cells) of the triangulated attribute graph "
        "(paper: 10^7, for GPUs)",
    )
    max_model_cells: int = Field(
        default=1_000_000,
        ge=1,
        le=10**8,
        description="cap on the graph's cliques together and on the fitted model (cells)",
    )
    theta: float = Field(
        default=3.0,
        ge=0.001,
        le=1000,
        description="θ-usefulness: a candidate needs ñ/cells ≥ θ × the expected |noise| per cell "
        "(paper: 6; at least 0.001: θ·σ must not underflow to 0)",
    )
    graph_growth: Literal["auto", "exact", "local"] = Field(
        default="auto",
        description="how Alg. 1 sizes each pair it tries and the rounds each candidate: "
        "'exact' triangulates the whole graph with it; 'local' grows the triangulated graph "
        "(parts.attribute_graph) or the model's junction tree by it; 'auto': "
        f"'exact' up to {LOCAL_GRAPH_COLUMNS} columns, 'local' beyond (see graph_growth)",
    )
    max_marginal_attributes: int = Field(
        default=6, ge=2, le=10, description="largest number of attributes of a candidate marginal"
    )
    rounds: int | None = Field(
        default=None, ge=0, le=10_000, description="t refinement rounds; default ⌊0.8·d⌋"
    )
    candidates: int = Field(
        default=400, ge=1, le=100_000, description="k: candidates scored per round"
    )
    independence_factor: float = Field(
        default=1.0,
        ge=0,
        le=100,
        description="with compress: do not measure an initial marginal in which no pair has a "
        "noisy r(A,B) = R̃/ñ of at least this factor × √(|A|·|B|/ñ), the level two independent "
        "attributes reach from sampling alone (0: measure all; not in the paper)",
    )
    noise_correction: bool = Field(
        default=True,
        description="subtract each candidate's expected measurement-noise L1, √(2/π)·σ·cells, "
        "from its noisy score before the argmax (notes G18; AIM's rule; post-processing)",
    )
    prune_subsumed: bool = Field(
        default=True,
        description="drop initial marginals contained in another initial marginal (their budget "
        "goes to the others) and never select a subset of a measured marginal (notes G7)",
    )
    score_grid: int = Field(
        default=8,
        ge=1,
        le=1024,
        description="g: scores are released as integers on the public 1/g grid (sensitivity ×g)",
    )
    round_iterations: int = Field(
        default=100, ge=1, le=100_000, description="warm-started mirror-descent steps per round"
    )
    iterations: int = Field(
        default=1000, ge=1, le=100_000, description="mirror-descent steps of the final fit"
    )
    synthesis: Literal["balanced", "round", "sample"] = Field(
        default="balanced",
        description="'balanced' or 'round' (controlled rounding, as the reference code's rounded "
        "allocation) or 'sample' (i.i.d. rows, as the paper)",
    )

    @model_validator(mode="after")
    def _shares_leave_room(self) -> PrivMRFParams:
        first = self.one_way_share if self.compress else self.total_share
        shares = (self.r_share, self.selection_share, first)
        if sum(exact_share(share) for share in shares) >= 1:  # exact: 0.7 + 0.2 + 0.1 is 1
            raise ValueError(
                "r_share + selection_share + (one_way_share or total_share) must be below 1"
            )
        return self


class PrivMRFMechanism(Mechanism):
    """Noisy pairwise R-scores → clique-capped attribute graph → θ-useful candidates → CFS
    initial marginals → t rounds of (fit MRF, Gaussian noisy-max over k sampled candidates,
    measure the winner) → final fit → sampling from the MRF.

    Per privacy unit (at most k rows after truncation; ``run(..., contribution_bound=k)``): the
    run below is made at the row-level budget ρ/k² and each release is stated with sensitivity
    k·Δ and ρ k²·ρ_i, σ² unchanged, so the charges add up to ρ per unit (engine/privacy_unit/
    group.py: k rows move a statistic of per-row sensitivity Δ by at most kΔ; for a count k is
    attained, all of a unit's rows in one cell, so no tighter bound holds). R-scores:
    per row 2g on the grid, per unit 2gk.

    Privacy (add/remove one row, ρ-zCDP; every release is integer-valued with exact discrete
    Gaussian noise N_Z(0, σ²) from the CSPRNG ``noise_source``, which is Δ²/(2σ²)-zCDP, Canonne,
    Kamath, Steinke 2020; composition by summing ρ, Bun & Steinke 2016). ρ is split in exact
    fractions: ρ_R = ``r_share``·ρ, ρ_S = ``selection_share``·ρ, ρ_1 = ``one_way_share``·ρ if
    ``compress`` (else ρ_n = ``total_share``·ρ) and ρ_M = the rest (with d = 1 there are no
    pairs, and with t = 0 no rounds: those shares go to ρ_M).
    * One-way marginals (``compress``): ρ_1 split ∝ size^(2/3), each ``measure_marginal``
      (sensitivity 1). Compression (values below ``compress_sigmas``·σ share a code) and
      everything after run on this public re-coding; ñ is then the precision-weighted total of
      these noisy marginals (post-processing) and no separate ñ is released.
    * R-scores: for each of the m = d(d−1)/2 pairs, ⌊g·R⌋ (g = ``score_grid``) computed exactly
      in integers; R moves by ≤ 2 (Lemma 4, property-tested), so ⌊g·R⌋ moves by ≤ 2g (lemma in
      engine/mechanisms/privmrf/parts.py). Noise σ² = (2g)²·m/(2ρ_R): one ``GaussianCharge`` of
      ρ_R/m per score.
    * ñ (only without ``compress``): the row count (sensitivity 1) with σ² = 1/(2ρ_n), one
      ``GaussianCharge``.
    * Marginals: d' ≤ d initial (d' = d without ``prune_subsumed`` and
      ``independence_factor``) plus one per round, each
      ``measure_marginal`` (sensitivity 1) at ρ_M/(d' + t); d' is a function of public and
      noisy values only. θ-usefulness keeps the nominal σ_m of ρ_M/(d + t).
    * Selection: round i scores k_i = min(k, eligible) candidates; the score
      ‖⌊g·μ⌉ − g·T_M‖₁ (μ: the model fitted to earlier releases, so fixed; integer, sensitivity
      g) gets σ² = g²·k_i·t/(2ρ_S), one ``GaussianCharge`` of ρ_S/(t·k_i) per score: each round
      spends exactly ρ_S/t. The argmax of the noisy scores is post-processing.
    * Whatever a run could not spend (a round with no eligible candidate left) is spent at the
      end by measuring the chosen marginals once more, split equally, so the charges always sum
      to ρ exactly.
    Post-processing: the graph (triangulation of public edges chosen by noisy scores), U, CFS,
    the uniform draw of the k candidates (from ``noise_source``: it depends on noisy outputs and
    public sizes only, and drawing it there keeps all releases independent of ``rng``), fitting
    (engine's Private-PGM estimator), sampling (seeded ``rng``). The true n is never used as a
    public number: the usefulness test uses ñ, the output size and the model total come from the
    noisy marginals' totals.

    Deviations from the paper (notes-privmrf.md, "the notes"), and why:
    * ρ-zCDP accounting with discrete Gaussian noise on integers instead of the analytic
      Gaussian/GDP composition; scores are released on a public 1/g grid (exact sensitivity);
    * default split 10% R / 10% selection / 80% marginals as the issue asks, of which 15% of ρ
      first measures the one-way marginals for MST/AIM-style domain compression (not in the
      paper; the reference code uses hand-made value hierarchies on adult for the same reason:
      with θ-usefulness a 100-value attribute can only pair with binary ones). ñ comes from
      those marginals' totals instead of a 1% release. Adult ε = 1 (δ = 1e-9, ρ ≈ 0.015),
      3-way TVD on 120 random triples, single runs: 0.103–0.109 without, 0.098 with;
    * θ = 3 instead of 6 (adult, with compression: 0.092/0.093/0.091 vs 0.098/0.099/0.098;
      θ = 1.5 or 2: 0.098; the paper tuned θ on NLTCS only, binary attributes);
    * τ_c = 10^5 cells per clique and 10^6 for the graph and the model, instead of 10^7 (the
      paper used GPUs; the notes' G19 suggest 10^6). τ_c = 10^6 helped adult slightly (3-way
      0.0850 → 0.0839, median of 6) but hurt temporal-match2 (ε = 1, median of 3: 0.0692 vs
      0.0524), see docs/methods.md;
    * noise_correction is on: the noisy score minus √(2/π)·σ·cells (notes G18, AIM's rule);
    * prune_subsumed: initial marginals contained in another initial marginal are not measured
      (their budget goes to the other marginals, as the reference code removes subsumed ones)
      and subsets of measured marginals are never candidates (notes G7);
    * independence_factor (with ``compress`` only): an initial marginal in which no pair reaches
      a noisy r = R̃/ñ of ``independence_factor``·√(|A|·|B|/ñ) is not measured (its budget goes
      to the others). Two independent attributes reach E[R/n] ≈ 0.4·√(|A|·|B|/n) at most from
      sampling alone (a heuristic, see ``independence_level``), so such a table adds little to
      the one-way marginals already measured. Adult, ε = 1, 3-way TVD, median of 6 paired runs:
      0.0860 → 0.0850; temporal-match2 and nist-taxi unchanged (0.0523 / 0.0524, 0.0637 /
      0.0637, median of 3);
    * Alg. 1 makes one pass in score order (a pair that fails is not retried after later
      insertions) and also enforces the total-cells cap; triangulation is the engine's weighted
      min-fill (the paper names none);
    * candidates have 2 to ``max_marginal_attributes`` = 6 attributes (reference code: ≤ 6);
      Alg. 3 falls back to the one-way {A} when no remaining candidate contains A (notes G5),
      and skips candidates whose junction tree would exceed the model cap;
    * the MRF is the engine's Private-PGM estimator on the junction tree of the measured sets
      (as AIM), not dense potentials on the graph's cliques; candidates whose addition would
      make that tree exceed ``max_model_cells`` are not eligible (public test). Intermediate
      fits are warm-started with ``round_iterations`` steps, the final fit ``iterations``;
    * CFS uses r = R̃/ñ (noisy TVD), radicand clamped at ≥ 1 (notes G4, as the reference code);
    * k candidates are drawn uniformly without replacement from the unmeasured eligible ones;
      when fewer remain all are scored and the round's selection budget is split over them;
    * rows: ``synthesis="balanced"`` controlled rounding (reference code: rounded allocation;
      paper: i.i.d.), N = round(model total), the precision-weighted noisy marginal totals.
    """

    name = "privmrf"
    description = (
        "PrivMRF (Cai, Lei, Wei, Xiao 2021): a Markov random field over an attribute graph "
        "built from noisy pairwise dependencies (clique size capped), refined by measuring the "
        "marginals the model gets most wrong (Gaussian noisy max)."
    )
    Params = PrivMRFParams
    resamplable = True
    counting_cache_bytes = FLAT_CACHE_BYTES  # its MarginalCache's cap
    milestones = (
        Milestone("measure_one_way", 0.0),
        Milestone("dependency_scores", 0.01),
        Milestone("measure_initial", 0.06),
        Milestone("refinement_rounds", 0.08),
        Milestone("final_fit", 0.88),
        Milestone("sample", 0.97),
    )

    def check_domain(self, domain: Domain, params: BaseModel) -> None:
        """Refuse a model cap below the first model (every one-way marginal): that fit would
        raise after the charge."""
        if not isinstance(params, PrivMRFParams):
            raise TypeError("params must be PrivMRFParams")
        check_one_way_model(domain, params.max_model_cells, "max_model_cells")

    def smallest_release_rho(self, domain: Domain, params: BaseModel, rho: Fraction) -> Fraction:
        """Per release, ρ/Δ²: R-scores ρ_R/(m·(2g)²), selection scores ρ_S/(t·k·g²), ñ, the
        one-ways' smallest part, a marginal ρ_M/(d + t) and a re-measurement of unspent budget
        (at least ρ_M/(d + t)² each)."""
        if not isinstance(params, PrivMRFParams):
            raise TypeError("params must be PrivMRFParams")
        d = len(domain)
        m = d * (d - 1) // 2
        t = (params.rounds if params.rounds is not None else math.floor(0.8 * d)) if m else 0
        grid = params.score_grid
        rho_r = exact_share(params.r_share) * rho if m else Fraction(0)
        rho_s = exact_share(params.selection_share) * rho if t else Fraction(0)
        rho_n = Fraction(0) if params.compress else exact_share(params.total_share) * rho
        rho_1 = exact_share(params.one_way_share) * rho if params.compress else Fraction(0)
        rho_m = rho - rho_r - rho_s - rho_n - rho_1
        parts = [rho_m / (d + t) ** 2]
        if m:
            parts.append(rho_r / (m * (R_SCORE_SENSITIVITY * grid) ** 2))
        if t:
            parts.append(rho_s / (t * params.candidates * (SELECTION_SENSITIVITY * grid) ** 2))
        if rho_n:
            parts.append(rho_n)
        if rho_1:
            weights = [size_weight(size) for size in domain.sizes]
            parts.append(rho_1 * min(weights) / sum(weights))
        return min(parts)

    def estimate_resources(self, domain: Domain, params: BaseModel, rows: int) -> ResourceEstimate:
        """The model at ``max_model_cells`` in every fit; the k scored candidates' estimates
        and true answers (each at most a clique) and every pair's table held at once."""
        if not isinstance(params, PrivMRFParams):
            raise TypeError("params must be PrivMRFParams")
        d = len(domain)
        rounds = params.rounds if params.rounds is not None else math.floor(0.8 * d)
        clique = min(params.max_clique_cells, params.max_model_cells)
        pairs = marginal_cells(domain, 2) - sum(domain.sizes)
        widest = largest_cells(domain, params.max_marginal_attributes)
        scored = params.candidates * min(clique, widest)
        tables = pairs + scored
        return resource_estimate(
            domain,
            rows,
            model_cells=params.max_model_cells,
            fit_iterations=(rounds + 1) * params.round_iterations + params.iterations,
            table_cells=tables,
            extra_work=rounds * scored,
            output=GRAPHICAL_OUTPUT,
        )

    def first_noise(
        self, domain: Domain, params: BaseModel, rho: Fraction
    ) -> tuple[NoisePreview, ...]:
        """With ``compress`` (the default): the one-way marginal of every column
        (``one_way_share``·ρ ∝ size^(2/3)); without: the noisy R-score of every pair."""
        if not isinstance(params, PrivMRFParams):
            raise TypeError("params must be PrivMRFParams")
        attributes = domain.attributes
        if params.compress:
            one_way = one_way_parts(domain, exact_share(params.one_way_share) * rho)
            return one_way_previews(attributes, one_way)
        pairs = all_pairs(len(domain))
        if not pairs:
            return ()
        rho_r = exact_share(params.r_share) * rho
        sensitivity, sigma2 = r_score_noise(len(pairs), params.score_grid, rho_r)
        return tuple(
            NoisePreview(
                description=f"R-score of ({attributes[a]}, {attributes[b]})",
                attributes=(attributes[a], attributes[b]),
                sensitivity=sensitivity,
                sigma2=sigma2,
                rho=rho_r / len(pairs),
            )
            for a, b in pairs
        )

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
        assert isinstance(params, PrivMRFParams)
        original = data.domain
        domain = original
        attributes = list(domain.attributes)
        d = len(attributes)
        pairs = all_pairs(d)
        m = len(pairs)
        t = (params.rounds if params.rounds is not None else math.floor(0.8 * d)) if m else 0
        source = SecureRandom() if noise_source is None else noise_source

        rho_r = exact_share(params.r_share) * rho if m else Fraction(0)
        rho_s = exact_share(params.selection_share) * rho if t else Fraction(0)
        rho_n = Fraction(0) if params.compress else exact_share(params.total_share) * rho
        rho_1 = exact_share(params.one_way_share) * rho if params.compress else Fraction(0)
        rho_m = rho - rho_r - rho_s - rho_n - rho_1
        per_marginal = rho_m / (d + t)
        sigma_m = math.sqrt(float(sigma2_for_rho(MARGINAL_SENSITIVITY, per_marginal)))
        grid = params.score_grid
        releases: list[GaussianCharge] = []
        measurements: list[Measurement] = []
        noisy: list[NoisyMarginal] = []

        # 0. Optional: noisy one-way marginals and domain compression (post-processing of them).
        compression = Compression.identity(original, [np.zeros(s) for s in original.sizes])
        if params.compress:
            progress.milestone("measure_one_way")
            progress(0.0, "measure")
            one_way = [
                measure_marginal(data, [attr], part, source)
                for attr, part in zip(attributes, one_way_parts(original, rho_1), strict=True)
            ]
            compression, data, one_way_noisy = compress_after_one_ways(
                data, one_way, True, params.compress_sigmas
            )
            domain = compression.domain
            measurements.extend(one_way)
            noisy.extend(one_way_noisy)

        # 1. Noisy R-scores (Alg. 1, lines 1-2) and the capped attribute graph.
        progress.milestone("dependency_scores")
        progress(0.0, "select")
        noisy_r = np.zeros(m)
        if m:
            sens_r, sigma2_r = r_score_noise(m, grid, rho_r)
            # Every pair in one request (GROUPING SETS batches on DuckDB and Spark).
            pair_names = [(attributes[a], attributes[b]) for a, b in pairs]
            floored = np.array(
                [r_score_floor(table, grid) for table in count_marginals(data, pair_names)],
                dtype=np.int64,
            )
            noisy_r = (floored + discrete_gaussian_noise(sigma2_r, (m,), source)) / grid
            releases.extend(
                GaussianCharge(
                    description=f"PrivMRF R-score of ({attributes[a]}, {attributes[b]})",
                    sensitivity=sens_r,
                    sigma2=sigma2_r,
                    rho=rho_r / m,
                )
                for a, b in pairs
            )
        _, cliques = attribute_graph(
            domain.sizes,
            pairs,
            noisy_r.tolist(),
            params.max_clique_cells,
            params.max_model_cells,
            growth=graph_growth(original, params),
        )

        # 2. ñ and the θ-useful candidates (Alg. 2).
        if params.compress:
            n_tilde = estimate_total(noisy)
        else:
            sigma2_n = sigma2_for_rho(1, rho_n)
            n_tilde = float(
                int(count_marginal(data, ()))
                + int(discrete_gaussian_noise(sigma2_n, (1,), source)[0])
            )
            releases.append(
                GaussianCharge(
                    description="PrivMRF noisy row count",
                    sensitivity=Fraction(1),
                    sigma2=sigma2_n,
                    rho=rho_n,
                )
            )
        limit = useful_cells(n_tilde, params.theta, sigma_m)
        candidates = candidate_marginals(domain, cliques, limit, params.max_marginal_attributes)
        progress(0.05, "select")

        # 3. Initial marginals by CFS on r = R̃/ñ (Alg. 3), then measured (Alg. 4, line 1).
        scale = max(float(n_tilde), 1.0)
        r_of = {
            frozenset((attributes[a], attributes[b])): float(noisy_r[i]) / scale
            for i, (a, b) in enumerate(pairs)
        }
        cap = params.max_model_cells

        def dependence(a: str, b: str) -> float:
            return r_of[frozenset((a, b))]

        sizers: dict[tuple[Clique, ...], ModelSizer] = {}

        def fits(chosen: Sequence[Clique], cand: Clique) -> bool:
            key = tuple(chosen)
            if key not in sizers:  # one sizer per state of `chosen` (Alg. 3 only appends)
                sizers.clear()
                sizers[key] = ModelSizer(domain, chosen)
            return sizers[key].size_with(cand) <= cap

        chosen = initial_marginals(domain, candidates, dependence, fits)
        if params.prune_subsumed:
            chosen = prune_subsumed(chosen)
        if params.compress and params.independence_factor > 0:
            chosen = (
                drop_independent(domain, chosen, dependence, scale, params.independence_factor)
                or chosen
            )
        per_marginal = rho_m / (len(chosen) + t)
        sigma_measure = math.sqrt(float(sigma2_for_rho(MARGINAL_SENSITIVITY, per_marginal)))
        progress.milestone("measure_initial")
        progress(0.06, "measure")
        for attrs in chosen:
            mm = measure_marginal(data, list(attrs), per_marginal, source)
            measurements.append(mm)
            noisy.append(NoisyMarginal.from_measurement(mm))
        measured: list[Clique] = list(chosen)
        remaining = [c for c in candidates if c not in set(measured)]
        answer = MarginalCache(data, ANSWER_CACHE_CELLS)

        # 4. Refinement rounds.
        progress.milestone("refinement_rounds")
        progress(0.08, "estimate")
        model = estimate(
            domain, noisy, iterations=params.round_iterations, max_cells=params.max_model_cells
        )
        unspent = Fraction(0)
        # Beyond LOCAL_GRAPH_COLUMNS a candidate is sized by growing the model's junction tree
        # locally (as AIM and PPSyn do) instead of triangulating every measured set with it.
        local = graph_growth(original, params) == "local"
        pieces: Memo = {}
        for i in range(t):
            start = 0.08 + 0.8 * i / t
            end = 0.08 + 0.8 * (i + 1) / t
            progress(start, "select")
            fits_now = _fits(domain, model, measured, cap, pieces if local else None)
            eligible = [
                c
                for c in remaining
                if not (params.prune_subsumed and subsumed(c, measured)) and fits_now(c)
            ]
            if not eligible:
                unspent += rho_s / t + per_marginal
                continue
            k_i = min(params.candidates, len(eligible))
            sampled = [eligible[j] for j in sorted(source.sample(range(len(eligible)), k_i))]
            estimates = model.project_many(sampled)
            answer.prefetch(sampled)  # one request on DuckDB/Spark; nothing on a Dataset
            scores = np.array(
                [
                    selection_score(est, answer(c), grid)
                    for c, est in zip(sampled, estimates, strict=True)
                ],
                dtype=np.int64,
            )
            sens_h = Fraction(SELECTION_SENSITIVITY * grid)
            sigma2_h = sens_h**2 * k_i * t / (2 * rho_s)
            noisy_h = scores + discrete_gaussian_noise(sigma2_h, (k_i,), source)
            releases.extend(
                GaussianCharge(
                    description=f"PrivMRF round {i + 1}: selection score of {c}",
                    sensitivity=sens_h,
                    sigma2=sigma2_h,
                    rho=rho_s / (t * k_i),
                )
                for c in sampled
            )
            adjusted = noisy_h.astype(np.float64)
            if params.noise_correction:
                adjusted -= (
                    grid
                    * NOISE_L1
                    * sigma_measure
                    * np.array([domain.cells(c) for c in sampled], dtype=np.float64)
                )
            best = sampled[int(np.argmax(adjusted))]
            mm = measure_marginal(data, list(best), per_marginal, source)
            measurements.append(mm)
            noisy.append(NoisyMarginal.from_measurement(mm))
            measured.append(best)
            remaining.remove(best)
            progress(start + 0.2 * (end - start), "estimate")
            structure = (
                grown_structure(domain, noisy, model, TreeGrowth(model.tree, pieces), best)
                if local
                else []
            )
            model = self._fit(
                noisy,
                model,
                structure,
                params.round_iterations,
                params.max_model_cells,
                progress,
                start + 0.2 * (end - start),
                end,
            )

        # Anything a round could not spend re-measures the chosen marginals (exact total).
        if unspent > 0:
            distinct = list(dict.fromkeys(measured))
            for attrs in distinct:
                mm = measure_marginal(data, list(attrs), unspent / len(distinct), source)
                measurements.append(mm)
                noisy.append(NoisyMarginal.from_measurement(mm))

        # 5. Final fit and sampling.
        codes, total, fitted, extra = fit_and_sample(
            self.name,
            noisy,
            model,
            compression,
            cliques=model.cliques if local else (),
            iterations=params.iterations,
            max_cells=params.max_model_cells,
            rows=rows,
            max_rows=max_rows,
            rng=rng,
            synthesis=params.synthesis,
            progress=progress,
        )
        used = sum((mm.rho for mm in measurements), Fraction(0)) + sum(
            (r.rho for r in releases), Fraction(0)
        )
        return SynthesisResult(
            codes=codes,
            measurements=tuple(measurements),
            rho_used=used,
            estimated_total=total,
            releases=tuple(releases),
            axis_maps=measured_axis_maps(
                compression, measurements, len(original) if params.compress else 0
            ),
            model=fitted,
            extra=extra,
        )

    @staticmethod
    def _fit(
        noisy: Sequence[NoisyMarginal],
        warm: GraphicalModel,
        cliques: Sequence[Clique],
        iterations: int,
        max_cells: int,
        progress: ProgressReporter,
        start: float,
        end: float,
    ) -> GraphicalModel:
        return estimate(
            warm.domain,
            noisy,
            cliques=cliques,
            warm_start=warm,
            iterations=iterations,
            max_cells=max_cells,
            callback=estimation_progress(progress, start, end, iterations),
        )


def _fits(
    domain: Domain,
    model: GraphicalModel,
    measured: Sequence[Clique],
    cap: int,
    pieces: Memo | None,
) -> Callable[[Clique], bool]:
    """Whether measuring a candidate keeps the model within ``cap`` cells: the junction tree of
    every measured set plus the candidate (``pieces`` None), or the model's tree grown locally
    by it (``pieces``: the memo of re-triangulated pieces shared by the rounds). Public
    structure only."""
    if pieces is None:
        sizer = ModelSizer(domain, measured)
        return lambda clique: sizer.size_with(clique) <= cap
    return _fits_in(domain, model, (), cap, TreeGrowth(model.tree, pieces))  # AIM's local test
