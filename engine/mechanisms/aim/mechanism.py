"""AIM: an adaptive and iterative mechanism (McKenna, Mullins, Sheldon, Miklau, "AIM: An Adaptive
and Iterative Mechanism for Differentially Private Synthetic Data", PVLDB 2022)."""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from engine.accounting import exact_share, split_rho
from engine.counting import CountingEngine
from engine.domain import Domain
from engine.estimation import GraphicalModel, ModelSizer, NoisyMarginal, estimate, model_size
from engine.estimation.growth import TreeGrowth
from engine.estimation.junction_tree import build_junction_tree
from engine.marginals import FLAT_CACHE_BYTES, MarginalCache, Measurement, measure_marginal
from engine.mechanisms.aim.round_budget import RoundBudget
from engine.mechanisms.base import (
    GRAPHICAL_OUTPUT,
    DomainRefused,
    Mechanism,
    Milestone,
    ProgressReporter,
    ResourceEstimate,
    SelectionCharge,
    SynthesisResult,
    marginal_cells,
    resource_estimate,
    widest_columns,
)
from engine.mechanisms.fitting import estimation_progress, fit_and_sample
from engine.mechanisms.preview import NoisePreview, one_way_previews
from engine.models.compression import compress_after_one_ways, measured_axis_maps
from engine.noise import SecureRandom
from engine.selection import epsilon_for_rho, exponential_mechanism

Clique = tuple[str, ...]
BYTES_PER_CELL = 8
MEGABYTE = 2**20
CHECKED_PER_SCORED = 2
"""With more candidates than ``max_candidates``, a round sizes at most this many times
``max_candidates`` of them (in its random order) to find the eligible ones it scores, or more
until one fits (the one-ways inside the model always do): the subset stays a data-independent
draw, and a round near the model cap, where few candidates fit, no longer sizes all of them
(PPSyn on loans: 81 % of its time in that walk)."""
# True answers of candidates up to this many cells are kept between rounds; larger ones are
# recounted when scored (memory stays bounded on wide tables with large domains).
ANSWER_CACHE_CELLS = 200_000


class AIMParams(BaseModel):
    """Parameters of AIM (see AIMMechanism for where the defaults deviate from the paper)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    degree: int = Field(
        default=3, ge=1, le=4, description="the workload: every marginal of this many attributes"
    )
    max_workload_cells: int | None = Field(
        default=None, ge=1, description="leave workload marginals with more cells than this out"
    )
    rounds: int | None = Field(
        default=None, ge=1, le=100_000, description="T (sets the first σ); default 16 × columns"
    )
    one_way_share: float | None = Field(
        default=0.25,
        gt=0,
        lt=1,
        description="share of ρ for the first one-way marginals (null: the paper's 0.9ρ/T each)",
    )
    selection_share: float = Field(
        default=0.05, gt=0, lt=1, description="share of each round's budget spent on selection"
    )
    one_way_split: Literal["equal", "size"] = Field(
        default="size",
        description="split the first one-way budget equally, or ∝ size^(2/3) (PrivSyn's rule, "
        "which minimises the total expected L1 noise)",
    )
    anneal_guard: bool = Field(
        default=True,
        description="skip annealing when fewer than anneal_min_rounds rounds at the new cost "
        "would remain (false: always anneal, the paper's rule)",
    )
    anneal_min_rounds: int | None = Field(
        default=None,
        ge=2,
        le=100_000,
        description="rounds that must remain at the new cost for annealing (default: "
        "⌈columns/degree⌉, enough for the more precise measurements to reach every column)",
    )
    max_model_size_mb: float = Field(
        default=10.0, gt=0, le=4096, description="cap on the graphical model (8 bytes per cell)"
    )
    round_iterations: int | None = Field(
        default=None,
        ge=1,
        le=100_000,
        description="warm-started mirror-descent steps per fit in the rounds (null: 100, or 50 "
        "with momentum)",
    )
    iterations: int | None = Field(
        default=None,
        ge=1,
        le=100_000,
        description="mirror-descent steps of the final fit (null: 1000, or 200 with momentum)",
    )
    max_candidates: Annotated[int, Field(ge=1, le=10_000_000)] | Literal["auto"] | None = Field(
        default="auto",
        description="score at most this many candidates per batch of rounds: a uniformly random "
        "subset of those eligible, drawn from the CSPRNG independently of the data ('auto': "
        "1000, or 500 on tables of more than 64 columns; null: all, the paper)",
    )
    model_growth: Literal["local", "retriangulate"] = Field(
        default="local",
        description="how a measured marginal enters the model: 'local' re-triangulates only the "
        "part of the junction tree it touches (engine.estimation.growth); 'retriangulate' "
        "triangulates every measured set again, as private-pgm does",
    )
    momentum: bool | None = Field(
        default=None,
        description="fit with momentum (engine.estimation.estimate): the loss falls several "
        "times faster per step, hence fewer default steps (null: on tables of more than 64 "
        "columns); post-processing only",
    )
    picks_per_fit: int | None = Field(
        default=None,
        ge=1,
        le=1000,
        description="marginals selected and measured between two model fits, each charged as "
        "a round, sharing no column with the others of its batch and fitting the tree they "
        "grew (null: 1 up to 64 columns, ⌈columns/16⌉ beyond; needs model_growth 'local')",
    )
    compress: bool = Field(
        default=True,
        description="merge values whose first noisy count is below compress_sigmas·σ into one "
        "code before selecting higher-order marginals (post-processing, as in MST)",
    )
    compress_sigmas: float = Field(default=3.0, ge=0, le=100)
    synthesis: Literal["balanced", "round", "sample"] = Field(
        default="balanced",
        description="'balanced' (controlled rounding, values spread evenly across the attributes "
        "drawn before), 'round' (controlled rounding) or 'sample' (i.i.d. rows)",
    )

    @model_validator(mode="after")
    def _batches_grow_locally(self) -> AIMParams:
        if (self.picks_per_fit or 1) > 1 and self.model_growth != "local":
            raise ValueError("picks_per_fit above 1 needs model_growth 'local'")
        return self


def workload_closure(
    domain: Domain, degree: int, max_cells: int | None = None
) -> dict[Clique, float]:
    """The downward closure of the workload (every ``degree``-way marginal with at most
    ``max_cells`` cells; the one-ways if none qualifies), each with AIM's weight Σ_w |c ∩ w|,
    ordered by size, then by name. Shared by AIM and PPSyn; a function of the public domain only.

    Built without walking every subset of every workload marginal (on 196 columns, 1.2 M
    marginals and 8.7 M subsets took 12 s): a set of fewer columns is in the closure exactly
    when its cells times the smallest sizes among the other columns fit ``max_cells`` (its
    cheapest extension is in the workload). ``tests/engine/mechanisms/test_mst_aim.py`` checks it
    against the definition."""
    degree = min(degree, len(domain))
    workload = [
        w
        for w in itertools.combinations(domain.attributes, degree)
        if max_cells is None or domain.cells(w) <= max_cells
    ]
    if not workload:
        workload = [(a,) for a in domain.attributes]
        degree = 1
    by_size = sorted(domain.attributes, key=domain.size)

    def extends(subset: Clique) -> bool:
        if max_cells is None:
            return True
        others = [a for a in by_size if a not in subset][: degree - len(subset)]
        return domain.cells(subset) * math.prod(domain.size(a) for a in others) <= max_cells

    # Σ_w |c ∩ w| = Σ_{a ∈ c} #{w : a ∈ w}: one count per attribute instead of a pass over the
    # workload per candidate (|closure| × |workload| set intersections took 20 minutes on 54
    # columns).
    containing = Counter(itertools.chain.from_iterable(workload))
    closure: list[Clique] = []
    for k in range(1, degree):
        closure += sorted(c for c in itertools.combinations(domain.attributes, k) if extends(c))
    closure += sorted(workload)
    return {c: float(sum(containing[a] for a in c)) for c in closure}


def workload_candidates(domain: Domain, params: AIMParams) -> dict[Clique, float]:
    """AIM's candidates: :func:`workload_closure` of ``params.degree`` and
    ``params.max_workload_cells``."""
    return workload_closure(domain, params.degree, params.max_workload_cells)


def model_cap_cells(max_model_size_mb: float) -> int:
    """The model-size cap in cells (8 bytes per cell), as AIM and PPSyn apply it."""
    return int(max_model_size_mb * MEGABYTE / BYTES_PER_CELL)


def check_one_way_model(domain: Domain, max_cells: int, name: str) -> None:
    """Refuse a cap below the first model, which holds every one-way marginal (Σ sizes cells;
    compression only shrinks them): that fit would raise after the charge."""
    one_ways = sum(domain.sizes)
    if one_ways > max_cells:
        raise DomainRefused(
            f"the first model holds every one-way marginal ({one_ways:,} cells), more than "
            f"{name} allows ({max_cells:,} cells); {widest_columns(domain)}: raise "
            f"{name}, or give those columns fewer bins or categories in the schema"
        )


ADAPTIVE_MILESTONES = (
    Milestone("measure_one_way", 0.0),
    Milestone("adaptive_rounds", 0.02),
    Milestone("final_fit", 0.88),
    Milestone("sample", 0.97),
)
"""The public progress schedule of AIM and PPSyn: one-way measurements, then the adaptive rounds
(however many the noise leads to: no milestone inside them), the final fit, sampling."""


def anneal_min_rounds(domain: Domain, params: AIMParams) -> int | None:
    """k of the anneal guard: an anneal must leave at least k rounds at the new cost;
    ``anneal_min_rounds``, by default ⌈columns/degree⌉ (rounds enough for marginals of
    ``degree`` columns at the new precision to reach every column once), at least 2. ``None``
    without the guard (the paper: always anneal)."""
    if not params.anneal_guard:
        return None
    return max(2, params.anneal_min_rounds or -(-len(domain) // params.degree))


def first_one_way_rhos(domain: Domain, params: AIMParams, rho: Fraction) -> tuple[Fraction, ...]:
    """ρ of each first one-way marginal: together the cost of ``columns`` measurements at the
    rounds' σ² = T/(2·(1 − selection_share)·ρ), or ``one_way_share``·ρ; split equally or
    ∝ size^(2/3) (``one_way_split``)."""
    rounds = params.rounds or 16 * len(domain)
    sigma2 = Fraction(rounds) / (2 * (1 - exact_share(params.selection_share)) * rho)
    one_way_total = len(domain) / (2 * sigma2)
    if params.one_way_share is not None:
        one_way_total = exact_share(params.one_way_share) * rho
    if params.one_way_split == "size":
        weights = [Fraction(size ** (2 / 3)).limit_denominator(10**6) for size in domain.sizes]
    else:
        weights = [Fraction(1)] * len(domain)
    return split_rho(one_way_total, weights)


def _random_order(n: int, source: random.Random) -> Iterator[int]:
    """0 … n − 1 in a uniformly random order, drawn lazily (Fisher–Yates with the swaps kept
    in a dict): taking the first k costs O(k) draws, not a shuffle of all n."""
    swapped: dict[int, int] = {}
    for i in range(n):
        j = source.randrange(i, n)
        yield swapped.get(j, j)
        swapped[j] = swapped.get(i, i)


def _fits_in(
    domain: Domain,
    model: GraphicalModel,
    measured: Sequence[NoisyMarginal],
    size_limit: int,
    growth: TreeGrowth | None,
) -> Callable[[Clique], bool]:
    """Whether a candidate is inside the model or keeps it under ``size_limit`` cells: with
    ``growth``, the size of the tree grown locally by the candidate; without, of the junction
    tree of every measured set plus the candidate (private-pgm's hypothetical model size)."""
    if growth is not None:
        labels = model.tree.labels

        def grown(clique: Clique) -> bool:
            ids = labels.clique(clique)
            return growth.inside(ids) or (
                domain.cells(clique) <= size_limit and growth.size_with(ids) <= size_limit
            )

        return grown
    free = _downward_closure(model.cliques)
    sizer = ModelSizer(domain, list({m.attributes for m in measured}))

    def retriangulated(clique: Clique) -> bool:
        return frozenset(clique) in free or (
            domain.cells(clique) <= size_limit and sizer.size_with(clique) <= size_limit
        )

    return retriangulated


def grown_structure(
    domain: Domain,
    measured: Sequence[NoisyMarginal],
    model: GraphicalModel,
    growth: TreeGrowth | None,
    chosen: Clique,
) -> list[Clique]:
    """The cliques to re-fit with after measuring ``chosen`` (AIM and PPSyn): with ``growth``
    (``model_growth="local"``), ``model``'s tree grown locally by it, unless the junction tree
    of every ``measured`` set triangulated again has fewer cells (it can reorganise the whole
    tree); [] (triangulate again) otherwise. The eligibility test sized the grown tree, so the
    model never exceeds what was sized. Public functions of the structure only."""
    if growth is None:
        return []
    labels = model.tree.labels
    ids = labels.clique(chosen)
    if model_size(domain, [m.attributes for m in measured]) > growth.size_with(ids):
        return [labels.names(c) for c in growth.cliques_with(ids)]
    return []


WIDE_COLUMNS = 64
"""Up to this many columns AIM fits its model after every measurement (``picks_per_fit`` 1)."""
COLUMNS_PER_PICK = 16
"""Beyond :data:`WIDE_COLUMNS`, a batch holds one pick per this many columns by default."""
WIDE_CANDIDATES = 500
"""Candidates a batch scores by default beyond :data:`WIDE_COLUMNS` (1000 below)."""


def scored_candidates(domain: Domain, params: AIMParams) -> int | None:
    """``params.max_candidates`` with 'auto' resolved by the public domain: 1000, or
    :data:`WIDE_CANDIDATES` on tables of more than :data:`WIDE_COLUMNS` columns, where each
    candidate's projection and sizing cost grow with the model and a batch picks several."""
    if params.max_candidates != "auto":
        return params.max_candidates
    return WIDE_CANDIDATES if len(domain) > WIDE_COLUMNS else 1000


@dataclass(frozen=True)
class FitSettings:
    """How AIM fits its model: with ``momentum`` or not, ``rounds`` warm-started steps after each
    batch of picks, ``final`` steps before sampling."""

    momentum: bool
    rounds: int
    final: int

    def __post_init__(self) -> None:
        if self.rounds < 1 or self.final < 1:
            raise ValueError("rounds and final must be at least 1")


def fit_settings(domain: Domain, params: AIMParams) -> FitSettings:
    """``params``' fitting, its nulls resolved by the public domain: momentum on tables of more
    than :data:`WIDE_COLUMNS` columns (PPSyn's regime: 50 steps per fit, 200 in the final fit,
    where the loss falls several times faster per step), plain mirror descent with 100 and
    1000 steps otherwise (the paper's private-pgm fits)."""
    momentum = params.momentum if params.momentum is not None else len(domain) > WIDE_COLUMNS
    return FitSettings(
        momentum=momentum,
        rounds=params.round_iterations or (50 if momentum else 100),
        final=params.iterations or (200 if momentum else 1000),
    )


def picks_per_fit(domain: Domain, params: AIMParams) -> int:
    """How many marginals a round batch selects and measures before the model is fitted again:
    ``params.picks_per_fit``, by default 1 up to :data:`WIDE_COLUMNS` columns and
    ⌈columns/:data:`COLUMNS_PER_PICK`⌉ beyond (a function of the public domain)."""
    if params.model_growth != "local":
        return 1
    if params.picks_per_fit is not None:
        return params.picks_per_fit
    columns = len(domain)
    return 1 if columns <= WIDE_COLUMNS else -(-columns // COLUMNS_PER_PICK)


def scored_cells(domain: Domain, degree: int, tables: int, most: int | None) -> int:
    """The cells of the candidates a round scores (a work bound of AIM and PPSyn): all
    ``tables`` cells, or with more than ``most`` candidates (every set of at most ``degree``
    columns) that share of them, rounded up."""
    count = sum(math.comb(len(domain), k) for k in range(1, min(degree, len(domain)) + 1))
    if most is None or count <= most:
        return tables
    return -(-tables * most // count)


def _downward_closure(cliques: Sequence[Clique]) -> set[frozenset[str]]:
    closure: set[frozenset[str]] = set()
    for clique in cliques:
        for k in range(1, len(clique) + 1):
            closure.update(frozenset(c) for c in itertools.combinations(clique, k))
    return closure


class AIMMechanism(Mechanism):
    """Start from noisy one-way marginals, then repeatedly select (exponential mechanism) the
    workload-relevant marginal the current model gets most wrong, measure it, re-fit.

    Per privacy unit (at most k rows after truncation; ``run(..., contribution_bound=k)``): the
    run below is made at the row-level budget ρ/k² and each release is stated with sensitivity
    k·Δ and ρ k²·ρ_i, σ² unchanged, so the charges add up to ρ per unit (engine/privacy_unit/
    group.py: k rows move a statistic of per-row sensitivity Δ by at most kΔ; for a count k is
    attained, all of a unit's rows in one cell, so no tighter bound holds). The
    selection scores (weighted L1 errors against a model fixed by earlier releases) move by at
    most k times the largest weight.

    Privacy (add/remove one row, ρ-zCDP), with T rounds and selection share s: first the d
    one-way marginals are measured (discrete Gaussian, L2 sensitivity 1), together with
    ``one_way_share``·ρ split over them (equally or ∝ size^(2/3)), or 0.9ρ/T each as in the
    paper. Every round then charges ε²/8 = sρ/T for a selection and 1/(2σ²) = (1 − s)ρ/T for a
    measurement, both ×4 after each annealing step (σ halved, ε doubled). When what is left would
    not cover two more rounds, the last round takes exactly the remainder (s for selection,
    1 − s for measurement). All amounts are exact fractions, so the charges sum to ρ exactly
    (engine.mechanisms.aim.round_budget holds this schedule).
    The selection score of a candidate c with weight w_c is w_c·(‖x_c − x̂_c‖₁ − √(2/π)·σ·n_c):
    it changes by at most w_c when one row is added or removed, so the exponential mechanism uses
    the largest weight as its sensitivity. Model fitting, the annealing test (model versus
    model) and sampling are post-processing.

    Deviations from the paper and private-pgm's mechanisms/aim.py, each measured on adult at
    ε = 1, δ = 1e-9 (mean 3-way TVD, medians of 5–7 runs; together 0.094 → 0.079):
    * exact discrete Gaussian noise and CSPRNG selection; exact-fraction budgets (the float ε of
      the exponential mechanism is rounded down so ε²/8 never exceeds the charge);
    * the first one-way marginals get 25% of ρ, split ∝ size^(2/3) (PrivSyn's allocation, which
      minimises the total expected L1 noise), instead of 0.9ρ/T each: large-domain attributes
      (age, hours, fnlwgt) dominated the 3-way error through their one-way error;
    * MST's domain compression (values below 3σ merged) from those first noisy counts, so later
      marginals have fewer cells; merged values are decoded back by a balanced assignment;
    * 5% of each round for selection (paper: 10%);
    * annealing is skipped when fewer than ``anneal_min_rounds`` rounds (default
      ⌈columns/degree⌉, at least 2) at the new cost would remain. The paper always anneals. A
      guard of two rounds avoided sinking a third of the budget into one last marginal, but at
      large ε annealing still fired every few rounds, so few marginals were measured and the
      error rose with ε (temporal-match2, issue 15);
    * re-fits are warm-started with ``round_iterations`` steps, only the final fit runs
      ``iterations``; the workload defaults to all 3-way marginals; rows are synthesised by the
      balanced sampler;
    * a round scores at most ``max_candidates`` (1000) candidates: when more are eligible, a
      uniformly random subset drawn from the CSPRNG without looking at the data. For any fixed
      subset the exponential mechanism is ε-DP with the subset's largest weight as sensitivity,
      and a data-independent choice of subset keeps that; it bounds a round's work, which was
      all C(d, 3) candidates (26,000 on 54 columns, 1.2 M on 196): candidates are taken in a
      random order and sized until ``max_candidates`` fit or :data:`CHECKED_PER_SCORED` times
      that many were sized;
    * ``model_growth="local"``: candidates are sized by re-triangulating only the part of the
      junction tree they touch (engine.estimation.growth) instead of triangulating every
      measured set again for every candidate (private-pgm's hypothetical model size,
      ``model_growth="retriangulate"``); the chosen one enters the model by whichever of the
      two gives fewer cells, so the model is never larger than sized;
    * on tables of more than :data:`WIDE_COLUMNS` columns (``picks_per_fit``, ``momentum``):
      ⌈columns/16⌉ rounds per model fit instead of one, 500 candidates scored per batch
      instead of 1000, and fits with momentum (50 steps per fit, 200 in the final one). Every
      round of a batch is charged and privately selected as before, on the scores of the model
      fitted before the batch: its first pick among the
      eligible candidates, each later one among those sharing no column with the batch's picks
      and fitting the tree they have grown (:meth:`_draw`: exactly the exponential mechanism
      over that public set), so a batch is as private as its rounds one by one. A round whose
      candidates all fail to fit is not charged; the next batch starts there. On a 196-column
      table a fit, the projections and the sizing of 1,000 candidates made each round cost
      1–7.5 s (26 minutes in all).
    Set ``compress=false, one_way_share=null, one_way_split="equal", selection_share=0.1,
    anneal_guard=false, synthesis="round", max_candidates=null, model_growth="retriangulate"``
    for the paper's behaviour. On nltcs (16 binary columns) the paper's settings were slightly
    better (3-way 0.0069 vs 0.0076).
    """

    name = "aim"
    description = (
        "AIM (McKenna, Mullins, Sheldon, Miklau 2022): adaptively selects and measures the "
        "marginals a graphical model gets most wrong, for a workload of k-way marginals. The "
        "most accurate method here; slower than MST."
    )
    Params = AIMParams
    resamplable = True
    counting_cache_bytes = FLAT_CACHE_BYTES  # its MarginalCache's cap
    milestones = ADAPTIVE_MILESTONES

    def check_domain(self, domain: Domain, params: BaseModel) -> None:
        """Refuse what would fail after the charge: a model cap below the one-way model, and,
        with ``one_way_share`` null, rounds so few that the first one-way marginals (d·(1 − s)/T
        of ρ) would leave nothing for the rounds (T must exceed d·(1 − s))."""
        if not isinstance(params, AIMParams):
            raise TypeError("params must be AIMParams")
        check_one_way_model(domain, model_cap_cells(params.max_model_size_mb), "max_model_size_mb")
        if params.one_way_share is None:
            rounds = params.rounds or 16 * len(domain)
            needed = len(domain) * (1 - exact_share(params.selection_share))
            if rounds <= needed:
                raise DomainRefused(
                    f"with one_way_share null the first one-way marginals take "
                    f"columns·(1 − selection_share)/rounds of ρ: rounds must be above "
                    f"{float(needed):g} on these {len(domain)} columns (got {rounds})"
                )

    def smallest_release_rho(self, domain: Domain, params: BaseModel, rho: Fraction) -> Fraction:
        """The smallest one-way part, and the smaller of selection and measurement in a round
        of base cost ρ/T; the last round takes what is left, which is at least the base cost
        of a round or, if the first round is the last, all that the one-ways left."""
        if not isinstance(params, AIMParams):
            raise TypeError("params must be AIMParams")
        d = len(domain)
        rounds = params.rounds or 16 * d
        share = exact_share(params.selection_share)
        if params.one_way_share is None:
            one_way_total = d * (1 - share) * rho / rounds
        else:
            one_way_total = exact_share(params.one_way_share) * rho
        if params.one_way_split == "size":
            weights = [Fraction(size ** (2 / 3)).limit_denominator(10**6) for size in domain.sizes]
        else:
            weights = [Fraction(1)] * d
        one_way = one_way_total * min(weights) / sum(weights)
        left = rho - one_way_total
        return min(one_way, min(left, rho / rounds) * min(share, 1 - share))

    def estimate_resources(self, domain: Domain, params: BaseModel, rows: int) -> ResourceEstimate:
        """The model at its cap in every round; the candidates' true answers and model
        estimates held at once (each at most the cap); T rounds of ``round_iterations``, each
        scoring at most ``max_candidates`` candidates (that share of the candidates' cells)."""
        if not isinstance(params, AIMParams):
            raise TypeError("params must be AIMParams")
        max_cells = model_cap_cells(params.max_model_size_mb)
        rounds = params.rounds or 16 * len(domain)
        fits = fit_settings(domain, params)
        tables = marginal_cells(domain, params.degree, cap=max_cells)
        scored = scored_cells(domain, params.degree, tables, scored_candidates(domain, params))
        return resource_estimate(
            domain,
            rows,
            model_cells=max_cells,
            fit_iterations=(rounds + 1) * fits.rounds + fits.final,
            table_cells=tables,
            extra_work=rounds * scored,
            output=GRAPHICAL_OUTPUT,
        )

    def expected_work(self, domain: Domain, params: BaseModel, rows: int) -> int:
        """:meth:`estimate_resources`' work with the T rounds in batches of
        :func:`picks_per_fit`: one fit and one scoring of the candidates per batch (the bound
        counts one per round, the case where no batch takes a second pick)."""
        if not isinstance(params, AIMParams):
            raise TypeError("params must be AIMParams")
        picks = picks_per_fit(domain, params)
        if picks == 1:
            return self.estimate_resources(domain, params, rows).work
        rounds = params.rounds or 16 * len(domain)
        batched = params.model_copy(update={"rounds": -(-rounds // picks), "picks_per_fit": 1})
        return self.estimate_resources(domain, batched, rows).work

    def cost_regime(self, domain: Domain, params: BaseModel) -> str | None:
        """'batched' when a fit follows several picks (:func:`picks_per_fit` above 1, by default
        on tables of more than :data:`WIDE_COLUMNS` columns). Its time does not grow with ρ as
        the one-pick runs' does: at small ρ the model is tiny and most of a run sizes candidates
        (many triangulations of long tree paths), at large ρ the model fills its cap (on 196
        columns 1.17-1.27 M of 1.31 M cells by ε = 1), so the time falls from ε = 0.1 to 1 and is
        about flat above (docs/benchmarks.md, "Cost preview")."""
        if not isinstance(params, AIMParams):
            raise TypeError("params must be AIMParams")
        return "batched" if picks_per_fit(domain, params) > 1 else None

    def calibration_params(self, domain: Domain) -> BaseModel:
        """The cost preview's runs (docs/benchmarks.md, "Cost preview") predate the batches of
        rounds, momentum and 500 candidates on wide tables: one pick per fit, plain fits, 1,000
        candidates. Up to 64 columns these are the defaults."""
        del domain
        return AIMParams(picks_per_fit=1, momentum=False, max_candidates=1000)

    def first_noise(
        self, domain: Domain, params: BaseModel, rho: Fraction
    ) -> tuple[NoisePreview, ...]:
        """The first one-way marginal of every column (:func:`first_one_way_rhos`)."""
        if not isinstance(params, AIMParams):
            raise TypeError("params must be AIMParams")
        return one_way_previews(domain.attributes, first_one_way_rhos(domain, params, rho))

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
        assert isinstance(params, AIMParams)
        original = data.domain
        rounds = params.rounds or 16 * len(original)
        max_cells = int(params.max_model_size_mb * MEGABYTE / BYTES_PER_CELL)
        fits = fit_settings(original, params)
        used = Fraction(0)

        one_way_rhos = first_one_way_rhos(original, params, rho)

        progress.milestone("measure_one_way")
        progress(0.0, "measure")
        measurements: list[Measurement] = []
        for attr, one_way_rho in zip(original.attributes, one_way_rhos, strict=True):
            m = measure_marginal(data, [attr], one_way_rho, noise_source)
            measurements.append(m)
            used += m.rho
        if used > rho:  # more columns than 0.9·T: cannot happen with T ≥ columns
            raise ValueError("rounds must be at least the number of columns")

        # Compression is a public function of the noisy one-way counts: the rest of the run works
        # on the re-coded table, and the synthetic rows are decoded back at the end.
        compression, data, noisy = compress_after_one_ways(
            data, measurements, params.compress, params.compress_sigmas
        )
        domain = compression.domain
        # True answers of the candidates, on the re-coded data (scoring only; released only
        # through the exponential mechanism and noisy measurements).
        answer = MarginalCache(data, ANSWER_CACHE_CELLS)
        candidates = workload_candidates(domain, params)
        progress.milestone("adaptive_rounds")
        progress(0.02, "estimate")
        model = estimate(
            domain,
            noisy,
            iterations=fits.rounds,
            max_cells=max_cells,
            momentum=fits.momentum,
        )

        # Budget state of the rounds, in exact fractions (engine.mechanisms.aim.round_budget).
        budget = RoundBudget.start(
            total=rho,
            used=used,
            rounds=rounds,
            select_share=exact_share(params.selection_share),
            min_rounds_after_anneal=anneal_min_rounds(original, params),
        )
        selections: list[SelectionCharge] = []
        # Draws the candidates a round scores when there are more than max_candidates: a public
        # choice, independent of the data (the OS CSPRNG, or the tests' seeded source).
        chooser = noise_source if noise_source is not None else SecureRandom()
        pool = list(candidates)
        local = params.model_growth == "local"
        picks = picks_per_fit(original, params)
        most = scored_candidates(original, params)
        step = 0
        while not budget.finished:
            # A batch of at most `picks` rounds scored on one model, then one fit. Each round is
            # charged before its selection, exactly as when every round is followed by a fit.
            before_batch = budget.used
            state, charge = budget.next_round()
            size_limit = int(max_cells * (state.used / rho))
            growth = TreeGrowth(model.tree) if local else None
            eligible = self._eligible(domain, model, noisy, pool, size_limit, most, chooser, growth)
            estimates = model.project_many(eligible)
            answer.prefetch(eligible)  # one request on DuckDB/Spark; nothing on a Dataset
            errors = np.array(
                [
                    float(np.abs(answer(c) - est).sum())
                    for c, est in zip(eligible, estimates, strict=True)
                ]
            )
            weights = np.array([candidates[c] for c in eligible])
            cells = np.array([float(domain.cells(c)) for c in eligible])
            labels = model.tree.labels
            available = np.arange(len(eligible))
            batch: list[tuple[Clique, float]] = []  # (marginal, σ of its measurement)
            taken: set[str] = set()
            grown = growth  # the tree grown by the batch's picks before the latest
            while True:
                sigma = math.sqrt(float(charge.sigma2))
                scores = weights[available] * (
                    errors[available] - math.sqrt(2 / math.pi) * sigma * cells[available]
                )
                # The candidates are fixed before the selection (a public function of the model
                # and the batch's earlier picks): their largest weight bounds how much one row
                # changes a score.
                sensitivity = float(weights[available].max())
                epsilon = epsilon_for_rho(charge.select)
                chosen = self._draw(
                    scores,
                    epsilon,
                    sensitivity,
                    [eligible[i] for i in available],
                    None if not batch else _fits_in(domain, model, noisy, size_limit, grown),
                    noise_source,
                )
                if chosen is None:
                    break  # nothing fits the grown tree: this round was not spent
                budget = state
                step += 1
                selections.append(
                    SelectionCharge(
                        description=f"AIM round {step}: marginal selection",
                        epsilon=epsilon,
                        sensitivity=sensitivity,
                        rho=charge.select,
                    )
                )
                m = measure_marginal(data, list(chosen), charge.measure, noise_source)
                measurements.append(m)
                noisy.append(NoisyMarginal.from_measurement(m))
                batch.append((chosen, sigma))
                if len(batch) >= picks or budget.finished:
                    break
                # The next pick: among the candidates that share no column with the batch's
                # picks, sized against the tree they have grown (public: structure and picks).
                taken.update(chosen)
                if grown is not None:
                    grown_cliques = grown.cliques_with(labels.clique(chosen))
                    grown = TreeGrowth(build_junction_tree(labels, grown_cliques))
                state, charge = budget.next_round()
                size_limit = int(max_cells * (state.used / rho))
                available = np.array(
                    [i for i, c in enumerate(eligible) if taken.isdisjoint(c)], dtype=np.int64
                )
                if len(available) == 0:
                    break
            start = 0.02 + 0.86 * float(before_batch / rho)
            end = 0.02 + 0.86 * float(budget.used / rho)
            progress(start, "select")
            before = [model.project(c) for c, _ in batch]
            # The tree grown by the batch: `grown` holds every pick but (perhaps) the last.
            structure = grown_structure(domain, noisy, model, grown, batch[-1][0])
            model = estimate(
                domain,
                noisy,
                cliques=structure,
                warm_start=model,
                iterations=fits.rounds,
                max_cells=max_cells,
                callback=estimation_progress(progress, start, end, fits.rounds),
                momentum=fits.momentum,
            )
            # Anneal when the model barely moved on a pick: measure more precisely from now on
            # (if enough rounds at the new cost remain; RoundBudget.anneal decides). A batch is
            # tested after its one fit and anneals at most once, when any of its picks barely
            # moved (its later rounds were charged at the cost before: one by one, the first
            # such pick would have raised it for the rounds after it).
            for (chosen, sigma), was in zip(batch, before, strict=True):
                moved = float(np.abs(model.project(chosen) - was).sum())
                if moved <= sigma * math.sqrt(2 / math.pi) * domain.cells(chosen):
                    budget = budget.anneal()
                    break

        used = budget.used
        codes, total, fitted, extra = fit_and_sample(
            self.name,
            noisy,
            model,
            compression,
            cliques=model.cliques if local else (),
            iterations=fits.final,
            max_cells=max_cells,
            momentum=fits.momentum,
            rows=rows,
            max_rows=max_rows,
            rng=rng,
            synthesis=params.synthesis,
            progress=progress,
        )
        return SynthesisResult(
            codes=codes,
            measurements=tuple(measurements),
            rho_used=used,
            estimated_total=total,
            selections=tuple(selections),
            axis_maps=measured_axis_maps(compression, measurements, len(original)),
            model=fitted,
            extra=extra,
        )

    @staticmethod
    def _draw(
        scores: np.ndarray,
        epsilon: float,
        sensitivity: float,
        candidates: Sequence[Clique],
        fits: Callable[[Clique], bool] | None,
        noise_source: random.Random | None,
    ) -> Clique | None:
        """One exponential-mechanism selection among ``candidates`` that ``fits`` (all without
        it); None when none fits.

        Drawn over all of them, a candidate that does not fit is put aside and the draw repeated
        over the rest: the result is distributed exactly as the mechanism over the candidates
        that fit (putting elements aside keeps the others' relative weights), a public set, so
        it is one ε-DP selection with ``sensitivity`` (the largest weight of all, at least
        theirs); the draws put aside are not released. Only the drawn candidates are sized,
        not all of them."""
        order = list(range(len(candidates)))
        weights = scores
        while order:
            pick = exponential_mechanism(weights, epsilon, sensitivity, source=noise_source)
            candidate = candidates[order[pick]]
            if fits is None or fits(candidate):
                return candidate
            del order[pick]
            weights = np.delete(weights, pick)
        return None

    @staticmethod
    def _eligible(
        domain: Domain,
        model: GraphicalModel,
        measured: Sequence[NoisyMarginal],
        candidates: Sequence[Clique],
        size_limit: int,
        most: int | None = None,
        chooser: random.Random | None = None,
        growth: TreeGrowth | None = None,
        fits_in: Callable[[Clique], bool] | None = None,
    ) -> list[Clique]:
        """Candidates already inside the model, or whose addition keeps it under the size limit
        (a public function of the current model, so filtering costs no budget). With ``growth``
        (``model_growth="local"``) the size is that of the current tree grown locally by the
        candidate; without, of the junction tree of every measured set plus the candidate.

        With ``most``, at most that many: the first eligible ones in an order drawn by
        ``chooser`` (a uniformly random subset of the eligible candidates, in the candidates'
        order), among at most :data:`CHECKED_PER_SCORED` × ``most`` sized, or more until one
        fits. The draw does not look at the data, so the exponential mechanism over the subset
        is as private as over all of them; it bounds a round's work on wide tables, where the
        3-way candidates number C(columns, 3) (26,000 on 54 columns) and sizing and scoring
        each of them in every round took minutes. ``fits_in`` replaces the size test (PPSyn's
        retriangulation with its memo)."""
        if fits_in is None:
            fits_in = _fits_in(domain, model, measured, size_limit, growth)
        sampled = most is not None and len(candidates) > most
        order = (
            _random_order(len(candidates), chooser or SecureRandom())
            if sampled
            else range(len(candidates))
        )
        chosen: list[int] = []
        # Sized at most CHECKED_PER_SCORED × most candidates: near the model cap few fit, and
        # walking on through all of them (each sized by a triangulation) was most of a round.
        budget = CHECKED_PER_SCORED * most if most is not None and sampled else None
        for checked, index in enumerate(order, start=1):
            if fits_in(candidates[index]):
                chosen.append(index)
                if sampled and len(chosen) == most:
                    break
            if budget is not None and checked >= budget and chosen:
                break  # past the budget only while none fits (a round must score something)
        return [candidates[index] for index in sorted(chosen)]
