"""PPSyn: partition-based synthetic data (Meifan Zhang, Dihang Deng, Lihua Yin, "Partition-based
differentially private synthetic data generation", arXiv 2310.06371), in a DP-safe variant."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, model_validator

from engine.accounting import exact_share, gaussian_rho
from engine.counting import CountingEngine
from engine.domain import Domain
from engine.estimation import GraphicalModel, ModelSizer, NoisyMarginal, estimate
from engine.estimation.growth import Memo, TreeGrowth
from engine.marginals import (
    FLAT_CACHE_BYTES,
    MARGINAL_SENSITIVITY,
    MarginalCache,
    Measurement,
    measure_marginal,
)
from engine.mechanisms.aim.mechanism import (
    ADAPTIVE_MILESTONES,
    ANSWER_CACHE_CELLS,
    BYTES_PER_CELL,
    MEGABYTE,
    AIMMechanism,
    Clique,
    check_one_way_model,
    grown_structure,
    model_cap_cells,
    scored_cells,
    workload_closure,
)
from engine.mechanisms.base import (
    GRAPHICAL_OUTPUT,
    GaussianCharge,
    Mechanism,
    ProgressReporter,
    ResourceEstimate,
    SelectionCharge,
    SynthesisResult,
    marginal_cells,
    resource_estimate,
)
from engine.mechanisms.fitting import estimation_progress, fit_and_sample
from engine.mechanisms.ppsyn.partition import NOISE_L1, NoiseRule, Partition, partition_counts
from engine.mechanisms.preview import NoisePreview, one_way_previews
from engine.mechanisms.splits import one_way_parts, size_weight
from engine.models.compression import compress_after_one_ways, measured_axis_maps
from engine.noise import SecureRandom, discrete_gaussian_noise
from engine.selection import epsilon_for_rho, exponential_mechanism

LOCAL_GROWTH_COLUMNS = 40
"""``model_growth="auto"`` re-triangulates up to this many columns and grows locally beyond.

Re-triangulation sizes every scored candidate by triangulating the whole Markov graph, a cost
that grows with the width. Measured (docs/benchmarks.md, "`ppsyn` and `privmrf` on wide
tables", and "ppsyn speed"), it keeps `ppsyn` within 3× of `aim` up to temporal-match2's 35
columns and is better there on adult's 14 (3-way TVD about 3 % lower than local growth), but on
loans' 54 columns it is 63 % of the run and `ppsyn` takes 4–6× `aim`. The threshold lies in
that gap (35 to 54 columns measured); 40 keeps every table up to 35 columns byte for byte as
before."""


def growth_mode(domain: Domain, params: PPSynParams) -> Literal["local", "retriangulate"]:
    """The structure growth a run uses: ``params.model_growth``, with 'auto' resolved by the
    public column count (:data:`LOCAL_GROWTH_COLUMNS`)."""
    if params.model_growth != "auto":
        return params.model_growth
    return "retriangulate" if len(domain) <= LOCAL_GROWTH_COLUMNS else "local"


class PPSynParams(BaseModel):
    """Parameters of PPSyn-safe (see PPSynMechanism for the deviations from the paper)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    degree: int = Field(
        default=3, ge=1, le=4, description="the workload: every marginal of this many attributes"
    )
    max_workload_cells: int | None = Field(
        default=None, ge=1, description="leave workload marginals with more cells than this out"
    )
    rounds: int | None = Field(
        default=None,
        ge=1,
        le=100_000,
        description="T: at most this many select–measure rounds; also sets the first per-round "
        "measurement budget (measurement share·ρ/T). Default 16 × columns (AIM's value; the "
        "paper gives none)",
    )
    eta: float = Field(
        default=0.7,
        ge=0.001,
        lt=1,
        description="η: a partitioned measurement must have expected noise error at most η × "
        "the model error it can correct (the score is contribution − noise/η)",
    )
    one_way_share: float = Field(
        default=0.25,
        gt=0,
        lt=1,
        description="share of ρ for the first one-way marginals (the paper: 0.1)",
    )
    selection_share: float = Field(
        default=0.1,
        gt=0,
        lt=1,
        description="share of ρ for all exponential-mechanism selections together",
    )
    max_groups: int = Field(
        default=1024, ge=1, le=1_000_000, description="most groups Algorithm 4 may create"
    )
    split_patience: int = Field(
        default=8,
        ge=1,
        le=10_000,
        description="Algorithm 4 stops after this many consecutive splits that raise the "
        "expected error (1: the paper's stop at the first increase)",
    )
    value_order: Literal["natural", "count"] = Field(
        default="natural",
        description="order of each attribute's values for Algorithm 4's axis-aligned boxes: by "
        "code ('natural', the schema's order, which keeps bins of numeric columns adjacent) or "
        "by the model's one-way count ('count')",
    )
    anneal: bool = Field(
        default=True,
        description="quadruple the per-round measurement budget when a measurement barely "
        "moved the model (AIM's rule; the paper sizes each measurement from true data instead)",
    )
    max_model_size_mb: float = Field(
        default=8.0, gt=0, le=4096, description="cap on the graphical model (8 bytes per cell)"
    )
    round_iterations: int = Field(
        default=50, ge=1, le=100_000, description="warm-started mirror-descent steps per round"
    )
    max_candidates: int | None = Field(
        default=1000,
        ge=1,
        le=10_000_000,
        description="score at most this many candidates per round: a uniformly random subset of "
        "those eligible, drawn from the CSPRNG independently of the data (null: all), as in AIM",
    )
    model_growth: Literal["auto", "local", "retriangulate"] = Field(
        default="auto",
        description="how a measured marginal enters the model: 'retriangulate' triangulates "
        "every measured set again; 'local' re-triangulates only the part of the junction tree "
        "it touches (engine.estimation.growth), as AIM does; 'auto': 'retriangulate' up to "
        f"{LOCAL_GROWTH_COLUMNS} columns, 'local' beyond (see growth_mode)",
    )
    iterations: int = Field(
        default=200, ge=1, le=100_000, description="mirror-descent steps of the final fit"
    )
    momentum: bool = Field(
        default=True,
        description="fit with momentum (engine.estimation.estimate): the loss falls several "
        "times faster per step, hence the fewer default steps; post-processing only",
    )
    compress: bool = Field(
        default=True,
        description="merge values whose first noisy count is below compress_sigmas·σ into one "
        "code before selecting higher-order marginals (post-processing, as in MST/AIM)",
    )
    compress_sigmas: float = Field(
        default=3.0, ge=0, le=100, description="the compression threshold, in σ of the one-ways"
    )
    synthesis: Literal["balanced", "round", "sample"] = Field(
        default="balanced",
        description="'balanced' (controlled rounding, values spread evenly across the attributes "
        "drawn before), 'round' (controlled rounding) or 'sample' (i.i.d. rows)",
    )

    @model_validator(mode="after")
    def _shares_leave_room(self) -> PPSynParams:
        # Exact decimals, so a sum that floats round below 1 is not let through.
        if exact_share(self.one_way_share) + exact_share(self.selection_share) >= 1:
            raise ValueError("one_way_share + selection_share must be below 1")
        return self


def candidate_partition(
    counts: npt.NDArray[np.float64],
    one_ways: Sequence[npt.NDArray[np.float64]],
    sigma: float,
    params: PPSynParams,
) -> Partition:
    """The partition of a candidate for a measurement with noise scale ``sigma``, from the
    model's marginal on it (``counts``) and the model's one-way marginals of its attributes
    (``one_ways``): a pure function of the current model (post-processing of released
    measurements) and public parameters; no data goes in.

    The marginal is re-ordered per attribute (by the one-way counts when
    ``value_order='count'``), partitioned by Algorithm 3 (one attribute) or 4 (more) with the
    expected-error rule E(P) = RE + √(2/π)·|P|·σ, or left whole when the identity partition is
    expected to be better, and the groups are mapped back to the original codes.
    """
    counts = np.maximum(np.asarray(counts, dtype=np.float64), 0.0)
    rule = NoiseRule(sigma)
    if params.value_order == "natural":
        return partition_counts(counts, rule, params.max_groups, params.split_patience)
    orders = [np.argsort(-np.asarray(one), kind="stable") for one in one_ways]
    index = np.ix_(*orders)
    found = partition_counts(counts[index], rule, params.max_groups, params.split_patience)
    groups = np.empty(counts.shape, dtype=np.intp)
    groups[index] = found.groups
    return Partition(groups, found.n_groups, found.reconstruction_error, found.cost)


def partition_contribution(
    true_counts: npt.NDArray[np.int64],
    estimate_counts: npt.NDArray[np.float64],
    groups: npt.ArrayLike,
) -> float:
    """‖Q_P(x − x̂)‖₁: the model's L1 error on the group sums. Adding or removing one row moves
    one cell of ``true_counts`` by 1, hence one group sum by 1, so this changes by at most 1."""
    diff = (true_counts - estimate_counts).ravel()
    return float(np.abs(np.bincount(np.asarray(groups).ravel(), weights=diff)).sum())


class PPSynMechanism(Mechanism):
    """PPSyn-safe: AIM-like rounds that measure *partitioned* marginals (sums over groups of
    cells) chosen by the exponential mechanism, with partitions computed from the current model.

    Per privacy unit (at most k rows after truncation; ``run(..., contribution_bound=k)``): the
    run below is made at the row-level budget ρ/k² and each release is stated with sensitivity
    k·Δ and ρ k²·ρ_i, σ² unchanged, so the charges add up to ρ per unit (engine/privacy_unit/
    group.py: k rows move a statistic of per-row sensitivity Δ by at most kΔ; for a count k is
    attained, all of a unit's rows in one cell, so no tighter bound holds).

    Pipeline and privacy claim per step (add/remove one row, ρ-zCDP, exact fractions; the charges
    sum to ρ exactly):

    1. One-way marginals: ``one_way_share``·ρ (default 0.25) split ∝ size^(2/3) (PrivSyn's
       allocation), each a discrete-Gaussian contingency table, L2 sensitivity 1,
       ρ_i = 1/(2σ_i²).
    2. Post-processing: MST's domain compression from those noisy counts, Private-PGM fit.
    3. Each round t ≤ T (T = ``rounds``): for every eligible candidate c (downward closure of the
       workload minus the one-ways, AIM's model-size filter), the partition P_c is computed from
       the model's marginal on c only (:func:`candidate_partition`: Algorithm 3 for one attribute,
       Algorithm 4 for several; post-processing). The round's measurement budget ρ_t is public
       (a ladder, see below), σ_t = 1/√(2ρ_t). The score is
       w_c·(‖Q_P(x_c − x̂_c)‖₁ − √(2/π)·σ_t·|P_c|/η), with AIM's workload weight w_c: the first
       term changes by at most 1 per added/removed row (one group sum moves by 1), the second is
       public, so Δ = max_c w_c. One exponential-mechanism draw with ε = √(8ρ_sel) is charged
       ρ_sel = ε²/8 (``SelectionCharge``). ρ_sel is the selection budget left divided by the
       rounds still expected (min(T − t + 1, measurement budget left / ρ_t), public), so the
       selections together spend at most ``selection_share``·ρ.
    4. The chosen marginal's group sums (one row is in exactly one group: L2 sensitivity 1,
       integer counts) get independent N_Z(0, σ_t²) noise: ρ_t = 1/(2σ_t²), charged as a
       ``GaussianCharge`` (or as a plain ``Measurement`` when P is the identity).
    5. The estimator receives the linear measurement (Q_P, ỹ, σ_t) (``NoisyMarginal.groups``) and
       re-fits with a warm start (post-processing). If the model moved by at most the expected
       noise on the measured groups, ρ_t is quadrupled (AIM's annealing, a function of the model).
    6. A round is the last when t = T or the measurement budget left is below 2ρ_t; its
       selection costs at most what the previous one did and its measurement takes everything
       else that is left, unused selection budget included, so nothing is over- or
       under-spent. Final fit and sampling are post-processing.

    Deviations from the paper (each needed for DP or taken from the implementer's notes):

    * the paper builds partitions, RE and each measurement's ρ_w from the TRUE counts and
      Contr_w, and its selection score Contr_w/ρ_w has no stated sensitivity: not DP (notes
      B.14 #1). Here partitions come from the model, the per-round ρ_t is public (so "contribution
      per unit ρ" reduces to the contribution, all candidates costing ρ_t), and the partition is
      the dual of the paper's rule: for the public σ_t it minimises the Thm-3 bound
      RE + √(2/π)·|P|·σ_t (RE of the model's counts) instead of minimising ρ for a target
      η·Contr. η keeps the paper's meaning as the required ratio of expected error to
      contribution, in the score; 0 < η < 1, default 0.7;
    * the contribution scored is the model's error on the group sums, the part a partitioned
      measurement can correct (the paper's Contr is over cells);
    * measurements are given to Private-PGM as the linear query Q_P (B.7, B.14 #7), not expanded
      uniformly to cells (equal information, no uniformity assumption, correct noise model);
    * Algorithm 4: the box with the largest RE is split at the cut (round-robin dimension) that
      most reduces the squared error; values keep their code order (ordering them by the model's
      one-way counts, as the notes suggest, measured worse on adult: 3-way 0.084/0.085 vs
      0.079/0.081/0.080); it stops
      after ``split_patience`` rising steps and returns the best partition seen; the identity is
      used when better;
    * the first one-way marginals get 25% of ρ (paper: 10%; AIM here uses 25% too). Measured
      on adult, δ = 1e-9, mean 3-way TVD of single runs: ε = 0.1: 0.183, 0.189 with 25% vs
      0.230, 0.218, 0.234, 0.240 with 10%; ε = 1: 0.0776 with 25% vs 0.079–0.081 with 10%;
    * budget: T rounds at most, never overspent, last round takes the exact remainder (B.14 #2);
      AIM's annealing ladder; MST's compression; warm starts; the balanced sampler;
    * every fit uses mirror descent with momentum (``momentum``), 50 steps per round and 200 in
      the final fit (AIM: plain, 100 and 1000). PPSyn's partitioned measurements make models
      10–40× larger than AIM's on the same data (adult ε = 1: about 1M cells against 28k), so
      its fits cost that much more per step; with momentum the loss falls several times faster
      per step (salary ε = 1, final fit: 100 steps reach a lower loss than 1000 plain ones).
      Measured with seeded noise on adult and salary at ε = 1 (docs/benchmarks.md, "ppsyn
      speed"): 3-way TVD no worse, CPU seconds about half;
    * a round scores at most ``max_candidates`` (1000) candidates, a uniformly random subset of
      the eligible ones drawn from the CSPRNG without looking at the data, as AIM does (issue
      25): on loans' 54 columns the 26,000 candidates were each sized by a triangulation and
      projected in every round, and `ppsyn` at ε = 1 did not finish in 11 minutes. Tables of at
      most 1,000 candidates (adult: 455) run as before. The exponential mechanism over a
      data-independent subset is as private as over all candidates (AIMMechanism's docstring).
    """

    name = "ppsyn"
    description = (
        "PPSyn-safe (Zhang, Deng, Yin): AIM-like adaptive rounds that measure partitioned "
        "marginals (noisy sums over groups of similar cells, groups derived from the current "
        "model), fitted with Private-PGM."
    )
    Params = PPSynParams
    resamplable = True
    counting_cache_bytes = FLAT_CACHE_BYTES  # its MarginalCache's cap
    milestones = ADAPTIVE_MILESTONES

    def check_domain(self, domain: Domain, params: BaseModel) -> None:
        """Refuse a model cap below the first model (every one-way marginal): that fit would
        raise after the charge."""
        if not isinstance(params, PPSynParams):
            raise TypeError("params must be PPSynParams")
        check_one_way_model(domain, model_cap_cells(params.max_model_size_mb), "max_model_size_mb")

    def smallest_release_rho(self, domain: Domain, params: BaseModel, rho: Fraction) -> Fraction:
        """The smallest one-way part; a selection gets at least sρ/T (the per-round selection
        budget never decreases) and a measurement at least (1 − ows − s)ρ/T (every round but
        the last takes the current ladder step, the last everything left)."""
        if not isinstance(params, PPSynParams):
            raise TypeError("params must be PPSynParams")
        rounds = params.rounds or 16 * len(domain)
        one_way_share = exact_share(params.one_way_share)
        select_share = exact_share(params.selection_share)
        weights = [size_weight(size) for size in domain.sizes]
        one_way = one_way_share * rho * min(weights) / sum(weights)
        per_round = min(select_share, 1 - one_way_share - select_share) * rho / rounds
        return min(one_way, per_round)

    def estimate_resources(self, domain: Domain, params: BaseModel, rows: int) -> ResourceEstimate:
        """The model at its cap in every round; each candidate's true answer, model estimate and
        partition (group ids) held at once; T rounds of ``round_iterations``, each scoring at
        most ``max_candidates`` candidates (that share of the candidates' cells)."""
        if not isinstance(params, PPSynParams):
            raise TypeError("params must be PPSynParams")
        max_cells = model_cap_cells(params.max_model_size_mb)
        rounds = params.rounds or 16 * len(domain)
        tables = 2 * marginal_cells(domain, params.degree, cap=max_cells)
        scored = scored_cells(domain, params.degree, tables, params.max_candidates)
        return resource_estimate(
            domain,
            rows,
            model_cells=max_cells,
            fit_iterations=(rounds + 1) * params.round_iterations + params.iterations,
            table_cells=tables,
            extra_work=rounds * scored,
            output=GRAPHICAL_OUTPUT,
        )

    def first_noise(
        self, domain: Domain, params: BaseModel, rho: Fraction
    ) -> tuple[NoisePreview, ...]:
        """The one-way marginal of every column: ``one_way_share``·ρ split ∝ size^(2/3)."""
        if not isinstance(params, PPSynParams):
            raise TypeError("params must be PPSynParams")
        one_way_total = exact_share(params.one_way_share) * rho
        return one_way_previews(domain.attributes, one_way_parts(domain, one_way_total))

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
        assert isinstance(params, PPSynParams)
        original = data.domain
        rounds = params.rounds or 16 * len(original)
        max_cells = int(params.max_model_size_mb * MEGABYTE / BYTES_PER_CELL)
        one_way_share = exact_share(params.one_way_share)
        select_share = exact_share(params.selection_share)
        if one_way_share + select_share >= 1:
            raise ValueError("one_way_share + selection_share must be below 1")
        one_way_total = one_way_share * rho
        select_left = select_share * rho
        measure_left = rho - one_way_total - select_left
        round_rho = measure_left / rounds

        progress.milestone("measure_one_way")
        progress(0.0, "measure")
        measurements: list[Measurement] = []
        for attr, one_way_rho in zip(
            original.attributes, one_way_parts(original, one_way_total), strict=True
        ):
            measurements.append(measure_marginal(data, [attr], one_way_rho, noise_source))
        used = sum((m.rho for m in measurements), Fraction(0))

        compression, data, noisy = compress_after_one_ways(
            data, measurements, params.compress, params.compress_sigmas
        )
        domain = compression.domain
        # True answers of the candidates, on the re-coded data (scoring only; released only
        # through the exponential mechanism and noisy measurements).
        answer = MarginalCache(data, ANSWER_CACHE_CELLS)
        workload = workload_closure(domain, params.degree, params.max_workload_cells)
        one_way_weights: dict[Clique, float] = {
            (a,): workload.get((a,), 1.0) for a in domain.attributes
        }
        candidates = {c: w for c, w in workload.items() if len(c) > 1}
        if not candidates:  # a one-attribute workload: re-measure one-way marginals
            candidates = dict(one_way_weights)
        progress.milestone("adaptive_rounds")
        progress(0.02, "estimate")
        model = estimate(
            domain,
            noisy,
            iterations=params.round_iterations,
            max_cells=max_cells,
            momentum=params.momentum,
        )

        # Draws the candidates a round scores when there are more than max_candidates: a public
        # choice, independent of the data (the OS CSPRNG, or the tests' seeded source).
        chooser = noise_source if noise_source is not None else SecureRandom()
        pool = list(candidates)
        local = growth_mode(original, params) == "local"
        cache = PartitionCache()
        size_memo: dict[int, int] = {}  # model sizes by Markov graph, shared by the rounds
        piece_memo: Memo = {}  # local growth's re-triangulated pieces, shared by the rounds
        selections: list[SelectionCharge] = []
        releases: list[GaussianCharge] = []
        eta = params.eta
        step = 0
        last = False
        previous_select: Fraction | None = None
        while not last:
            step += 1
            expected = min(rounds - step + 1, max(1, int(measure_left // round_rho)))
            select_rho = select_left / expected
            if step >= rounds or measure_left < 2 * round_rho:
                # The last round: its selection costs what the previous one did (at most), and
                # all other budget left, selection budget included, goes to its measurement.
                last = True
                if previous_select is not None:
                    select_rho = min(select_rho, previous_select)
                measure_rho = measure_left + select_left - select_rho
            else:
                measure_rho = round_rho
            select_left -= select_rho
            if last:
                select_left = Fraction(0)
                measure_left = Fraction(0)
            else:
                measure_left -= measure_rho
            previous_select = select_rho
            sigma2 = 1 / (2 * measure_rho)
            sigma = math.sqrt(float(sigma2))
            spent_before = used
            used += select_rho + measure_rho

            size_limit = int(max_cells * min(Fraction(1), used / rho))
            weight: dict[Clique, float] = {**one_way_weights, **candidates}
            growth = TreeGrowth(model.tree, piece_memo) if local else None
            eligible = AIMMechanism._eligible(
                domain,
                model,
                noisy,
                pool,
                size_limit,
                params.max_candidates,
                chooser,
                growth,
                fits_in=None
                if local
                else _fits_retriangulated(domain, noisy, size_limit, size_memo),
            )
            if not eligible:  # nothing else fits: re-measure a one-way marginal (always fits)
                eligible = list(one_way_weights)
            estimates = model.project_many(eligible)
            answer.prefetch(eligible)  # one request on DuckDB/Spark; nothing on a Dataset
            partitions = round_partitions(model, eligible, sigma, params, estimates, cache)
            scores = np.array(
                [
                    weight[c]
                    * (
                        partition_contribution(answer(c), est, partitions[c].groups)
                        - NOISE_L1 * sigma * partitions[c].n_groups / eta
                    )
                    for c, est in zip(eligible, estimates, strict=True)
                ]
            )
            sensitivity = max(weight[c] for c in eligible)
            epsilon = epsilon_for_rho(select_rho)
            chosen = eligible[
                exponential_mechanism(scores, epsilon, sensitivity, source=noise_source)
            ]
            partition = partitions[chosen]
            selections.append(
                SelectionCharge(
                    description=f"PPSyn round {step}: partitioned-marginal selection",
                    epsilon=epsilon,
                    sensitivity=sensitivity,
                    rho=select_rho,
                )
            )
            if partition.is_identity:
                m = measure_marginal(data, list(chosen), measure_rho, noise_source)
                measurements.append(m)
                noisy.append(NoisyMarginal.from_measurement(m))
            else:
                sums = _group_sums(answer(chosen), partition)
                released = sums + discrete_gaussian_noise(sigma2, sums.shape, noise_source)
                releases.append(
                    GaussianCharge(
                        description=f"PPSyn round {step}: {partition.n_groups} partition sums "
                        f"of {', '.join(chosen)}",
                        sensitivity=MARGINAL_SENSITIVITY,
                        sigma2=sigma2,
                        rho=gaussian_rho(MARGINAL_SENSITIVITY, sigma2),
                    )
                )
                noisy.append(
                    NoisyMarginal(
                        chosen, released.astype(np.float64), sigma, groups=partition.groups
                    )
                )
            before = _group_sums_float(model.project(chosen), partition)
            start = 0.02 + 0.86 * float(spent_before / rho)
            end = 0.02 + 0.86 * float(used / rho)
            progress(start, "select")
            model = estimate(
                domain,
                noisy,
                cliques=grown_structure(domain, noisy, model, growth, chosen),
                warm_start=model,
                iterations=params.round_iterations,
                max_cells=max_cells,
                callback=estimation_progress(progress, start, end, params.round_iterations),
                momentum=params.momentum,
            )
            after = _group_sums_float(model.project(chosen), partition)
            moved = float(np.abs(after - before).sum())
            if (
                params.anneal
                and not last
                and moved <= NOISE_L1 * sigma * partition.n_groups
                and measure_left >= 2 * 4 * round_rho
            ):
                round_rho *= 4

        codes, total, fitted, extra = fit_and_sample(
            self.name,
            noisy,
            model,
            compression,
            cliques=model.cliques if local else (),
            iterations=params.iterations,
            max_cells=max_cells,
            rows=rows,
            max_rows=max_rows,
            rng=rng,
            synthesis=params.synthesis,
            progress=progress,
            momentum=params.momentum,
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
            releases=tuple(releases),
        )


class PartitionCache:
    """Partitions of earlier rounds, reused while the noise scale is unchanged and the model's
    marginal moved (L1) by at most ``REFRESH`` × the measurement's expected noise; everything in
    it is a function of earlier models (post-processing)."""

    REFRESH = 0.25

    def __init__(self) -> None:
        self._entries: dict[Clique, tuple[float, npt.NDArray[np.float64], Partition]] = {}

    def get(
        self, clique: Clique, counts: npt.NDArray[np.float64], sigma: float
    ) -> Partition | None:
        entry = self._entries.get(clique)
        if entry is None or entry[0] != sigma:
            return None
        _, old, partition = entry
        limit = self.REFRESH * NOISE_L1 * sigma * partition.n_groups
        return partition if float(np.abs(counts - old).sum()) <= limit else None

    def put(
        self, clique: Clique, counts: npt.NDArray[np.float64], sigma: float, partition: Partition
    ) -> None:
        self._entries[clique] = (sigma, counts, partition)


def round_partitions(
    model: GraphicalModel,
    eligible: Sequence[Clique],
    sigma: float,
    params: PPSynParams,
    estimates: Sequence[npt.NDArray[np.float64]] | None = None,
    cache: PartitionCache | None = None,
) -> dict[Clique, Partition]:
    """Every eligible candidate's partition for noise scale ``sigma``: a function of the model
    (``estimates`` are its marginals on ``eligible``, if already computed) and of public
    parameters only; there is no data argument."""
    if estimates is None:
        estimates = model.project_many(eligible)
    attributes = sorted({a for c in eligible for a in c})
    one_way = dict(zip(attributes, model.project_many([(a,) for a in attributes]), strict=True))
    result = {}
    for clique, counts in zip(eligible, estimates, strict=True):
        found = None if cache is None else cache.get(clique, counts, sigma)
        if found is None:
            found = candidate_partition(counts, [one_way[a] for a in clique], sigma, params)
            if cache is not None:
                cache.put(clique, counts, sigma, found)
        result[clique] = found
    return result


def _group_sums(counts: npt.NDArray[np.int64], partition: Partition) -> npt.NDArray[np.int64]:
    sums = np.zeros(partition.n_groups, dtype=np.int64)
    np.add.at(sums, partition.groups.ravel(), counts.ravel())
    return sums


def _group_sums_float(
    values: npt.NDArray[np.float64], partition: Partition
) -> npt.NDArray[np.float64]:
    sums: npt.NDArray[np.float64] = np.bincount(
        partition.groups.ravel(), weights=values.ravel(), minlength=partition.n_groups
    ).astype(np.float64)
    return sums


def _fits_retriangulated(
    domain: Domain,
    measured: Sequence[NoisyMarginal],
    size_limit: int,
    size_memo: dict[int, int] | None = None,
) -> Callable[[Clique], bool]:
    """Whether measuring a candidate keeps the model under the size limit with
    ``model_growth="retriangulate"`` (a public function of what was measured, so filtering costs
    no budget). The size is that of the junction tree ``estimate`` would build from the measured
    sets, in measurement order, plus the candidate, so a chosen candidate can never make the
    re-fit exceed the cap."""
    sizer = ModelSizer(domain, [m.attributes for m in measured], size_memo)

    def fits(clique: Clique) -> bool:
        return domain.cells(clique) <= size_limit and sizer.size_with(clique) <= size_limit

    return fits
