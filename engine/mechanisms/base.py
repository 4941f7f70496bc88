"""The contract every synthesis mechanism follows, enforced in one place.

A mechanism receives the encoded data, a budget ρ (an exact ``Fraction``), its validated
parameters and explicit randomness, and returns synthetic codes plus every noisy measurement it
made. :meth:`Mechanism.run` checks the inputs, calls the mechanism's :meth:`Mechanism._synthesize`,
then refuses the result unless the measurements' ρ add up to exactly the ρ given, so a mechanism
can neither overspend nor silently underspend what the ledger charged.
"""

from __future__ import annotations

import abc
import functools
import inspect
import itertools
import json
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel

from engine.accounting import gaussian_rho
from engine.counting import CountingEngine, is_counting_engine
from engine.domain import Dataset, Domain
from engine.marginals import Measurement
from engine.mechanisms.preview import NoisePreview, unit_previews
from engine.models.fitted import FittedModel
from engine.models.fitted import resolve_rows as resolve_rows  # re-exported: the mechanisms use it
from engine.privacy_unit.group import (
    check_contribution_bound,
    row_level_rho,
    unit_level_epsilon,
    unit_level_rho,
)

IntArray = npt.NDArray[np.int64]

ProgressCallback = Callable[[float, str], None]
"""``progress(fraction, stage)``: fraction in [0, 1], non-decreasing, last call at 1.0.
Raising from it (e.g. :class:`SynthesisCancelled`) cancels the run; the engine lets it through.

The same signature serves both progress channels of :meth:`Mechanism.run`: ``progress`` gets the
engine's detailed progress (which can depend on the noise), ``on_milestone`` gets the public
milestones (``fraction`` and ``stage`` of a :class:`Milestone`, a function of public information
only)."""


class SynthesisCancelled(Exception):
    """Raised by a progress callback to stop a run; the engine never swallows it."""


class DomainRefused(ValueError):
    """A method cannot run on a declared domain (e.g. CIPHER's full joint would be too large).

    Decided from public information only (the declared domain and the params), so the message may
    be shown to analysts; the service turns it into a 422 before anything is reserved.
    """


class EngineRefused(DomainRefused):
    """A method (or its params) reads more of the data than the given counting engine offers,
    so it cannot run on that :class:`~engine.counting.CountingEngine`: e.g. DPCopula-MLE reads
    every row (codes in memory only), DPCopula-Kendall reads a subsample by position (an engine
    without ``codes_at``).

    Decided from the method, its params and the engine alone, before any data is read; the
    message names no data.
    """


MAX_NOISE_SIGMA2 = Fraction(2**96)
"""The largest σ² a release may need (σ = 2⁴⁸). engine.noise refuses a scale above 2⁵⁰, where
the noise would no longer fit comfortably in int64; noise this large is useless anyway."""


# Peak-memory model of a run (see :class:`ResourceEstimate`). Measured on this project's machine
# with /usr/bin/time -v on ``rhosynth synthesize`` and on engine.estimation.estimate alone; the
# figures and commands are in docs/benchmarks.md ("Resource estimates").
BASE_MEMORY_BYTES = 256 * 2**20
"""The interpreter with numpy, pandas, pyarrow and the engine (a whole run on adult with one
output row peaked at 186 MiB, the input table included)."""
OUTPUT_BYTES_PER_CELL = 48
"""Synthetic rows × columns for methods whose samplers draw int64 codes (independent, privsyn,
cipher, dpcopula): sampling, the cast to the narrow result, decoding and the Parquet write
together (measured 10–21 bytes per cell at 2 M rows on adult's 14 columns after the narrow
result; 16–35 before; kept at 48)."""
GRAPHICAL_OUTPUT_BATCH_BYTES = 128 * 2**20
"""The junction-tree sampler of mst, aim, ppsyn and privmrf draws at most 2**20 rows at a time
(engine.estimation.model.SYNTHESIS_BATCH_ROWS): the int64 group keys, sort keys, permutations
and positions of the column being drawn live for one batch (about 80 bytes per row)."""
GRAPHICAL_BATCH_ROWS = 2**20
"""That batch, whose codes are held up to three times at once (drawn, reordered, decompressed)."""
GRAPHICAL_OUTPUT_BYTES_PER_ROW = 32
"""Per output row of that sampler, whatever the number of columns: row-sized work beside the
codes (the release report's compact copy of the table, index arrays)."""
GRAPHICAL_OUTPUT_BYTES_PER_CODE_BYTE = 4
"""Per output cell of that sampler, per byte of the table's code type (the narrowest unsigned
type of its largest column: 1 byte up to 256 values, 2 up to 65,536, 4 beyond): the output
codes, with room for the report's and the writer's per-cell work. Measured (adult's 14
columns, uint8): sampling 10 M rows raised the peak by 24.6 bytes per row (the batch's working
memory included; 67 per row at 2 M rows), against 88 per row plus 128 MiB and the batch's codes
estimated; docs/benchmarks.md, "Scale: what stops 10 M rows"."""
SAMPLING_MODEL_BYTES_PER_CELL = 32
"""A model's cells while rows are drawn from it (beliefs, the conditionals and their copies); the
mirror-descent working memory (:data:`MODEL_BYTES_PER_CELL`) is released by then."""


@dataclass(frozen=True)
class OutputCost:
    """What a sampler needs for ``rows`` output rows: ``per_row`` bytes per row, ``per_cell``
    per cell, ``per_code_byte`` per cell and byte of the code type, and, for any rows, ``fixed``
    bytes plus ``batch_rows`` rows of codes held three times (see the constants above)."""

    per_row: int = 0
    per_cell: int = 0
    per_code_byte: int = 0
    fixed: int = 0
    batch_rows: int = 0

    def __post_init__(self) -> None:
        values = (self.per_row, self.per_cell, self.per_code_byte, self.fixed, self.batch_rows)
        if min(values) < 0:
            raise ValueError("output costs must be non-negative")

    def bytes(self, domain: Domain, rows: int) -> int:
        """The bytes for ``rows`` rows over ``domain`` (0 for none)."""
        if rows <= 0:
            return 0
        width = domain.code_dtype.itemsize
        columns = len(domain)
        batch = min(rows, self.batch_rows) * columns * width * 3
        cells = rows * columns * (self.per_cell + self.per_code_byte * width)
        return rows * self.per_row + cells + self.fixed + batch


INT64_OUTPUT = OutputCost(per_cell=OUTPUT_BYTES_PER_CELL)
GRAPHICAL_OUTPUT = OutputCost(
    per_row=GRAPHICAL_OUTPUT_BYTES_PER_ROW,
    per_code_byte=GRAPHICAL_OUTPUT_BYTES_PER_CODE_BYTE,
    fixed=GRAPHICAL_OUTPUT_BATCH_BYTES,
    batch_rows=GRAPHICAL_BATCH_ROWS,
)
MODEL_BYTES_PER_CELL = 160
"""A graphical model's cells during mirror descent: potentials, beliefs, messages, gradients and
line-search copies (measured 127–146 bytes per cell on 4–54 million cells)."""
TABLE_BYTES_PER_CELL = 16
"""A float64 table held at once, with its true counts or a copy (candidate scoring)."""
WORK_UNITS_PER_SECOND = 10**8
"""The rate at which :attr:`ResourceEstimate.work` is converted to seconds. One unit is one cell
of one mirror-descent iteration (or one cell of a table or of the output). This is optimistic on
purpose: 22–88 ns per model cell and iteration were measured, 10 ns is assumed, so a job refused
for time could not finish within the limit even at full speed on a bound it rarely reaches."""


SAMPLING_WORK_PER_CELL = 5
"""Work units per output cell of drawing rows from a saved model: 50 ns at the rate above, the
fastest measured (49–196 ns per cell for the junction-tree, independent and copula samplers on
adult at 20,000 and 200,000 rows; privsyn's GUM sampler is priced by its own iterations)."""


@dataclass(frozen=True)
class ResourceEstimate:
    """What one run of a method can need, from public information only: the declared domain, the
    params and the number of output rows (never the data, so refusing on it leaks nothing).

    ``memory_bytes`` bounds the peak memory of the run beyond the input table (whose size, the
    private row count, is not used): the largest model the params allow, the tables held at once
    and the output, at the per-cell costs above. ``work`` bounds the number of work units
    (model cells × mirror-descent iterations, plus table and output cells) when every iteration
    runs on a model at its cap; convert it with :data:`WORK_UNITS_PER_SECOND`.

    ``additive_bytes`` is the bound as engine.costs was calibrated on (before the fit and the
    sampling were found not to overlap, and before narrow output): the base, 48 bytes per output
    cell, the model and the tables added up. It is a feature of that fitted cost model, kept so
    its coefficients stay valid; it is not used to refuse or cap anything.
    """

    memory_bytes: int
    work: int
    additive_bytes: int = 0

    def __post_init__(self) -> None:
        for name in ("memory_bytes", "work", "additive_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a non-negative int")

    @property
    def seconds(self) -> float:
        """``work`` at :data:`WORK_UNITS_PER_SECOND` (infinite past a float's range)."""
        try:
            return self.work / WORK_UNITS_PER_SECOND
        except OverflowError:
            return math.inf


def subset_cells(sizes: Sequence[int], max_order: int) -> int:
    """Σ cells(S) over the attribute subsets S with 1 ≤ |S| ≤ ``max_order`` (exact ints): the
    total size of every marginal up to that order, e.g. AIM's candidates for a workload of that
    degree. Elementary symmetric polynomials, O(d·max_order), nothing enumerated."""
    e = [1] + [0] * max_order
    for size in sizes:
        for j in range(max_order, 0, -1):
            e[j] += int(size) * e[j - 1]
    return sum(e[1:])


_ENUMERATE_SUBSETS = 100_000


def marginal_cells(domain: Domain, max_order: int, *, cap: int | None = None) -> int:
    """Σ cells(S) over the attribute subsets with 1 ≤ |S| ≤ ``max_order`` and at most ``cap``
    cells: exact when there are at most 100,000 such subsets (enumerated), else the sum over all
    of them (:func:`subset_cells`, an upper bound that ignores the cap). Remembered per sizes:
    the output cap (app.jobs.resources.output_rows_limit) asks for the same estimate at some 28
    row counts, and enumerating 100,000 subsets takes about 10 ms."""
    return _marginal_cells(tuple(domain.sizes), max_order, cap)


@functools.lru_cache(maxsize=256)
def _marginal_cells(sizes: tuple[int, ...], max_order: int, cap: int | None) -> int:
    d = len(sizes)
    max_order = min(max_order, d)
    count = sum(math.comb(d, k) for k in range(1, max_order + 1))
    if count > _ENUMERATE_SUBSETS:
        return subset_cells(sizes, max_order)
    total = 0
    for k in range(1, max_order + 1):
        for subset in itertools.combinations(sizes, k):
            cells = math.prod(subset)
            if cap is None or cells <= cap:
                total += cells
    return total


WIDEST_NAMED = 3
"""How many of the columns with the most values a refusal names."""


def widest_columns(domain: Domain, count: int = WIDEST_NAMED) -> str:
    """Which columns make a model large, for refusals: "its widest columns are 'a' (1,024
    values), 'b' (512 values) and 'c' (300 values)", the ``count`` columns with the most values;
    "its 10 columns have 10 values each" when none is wider than the others. Public: the
    schema's sizes."""
    sizes = domain.sizes

    def values(n: int) -> str:
        return f"{n:,} value" + ("" if n == 1 else "s")

    if len(set(sizes)) == 1:
        if len(sizes) == 1:
            return f"its one column has {values(sizes[0])}"
        return f"its {len(sizes)} columns have {values(sizes[0])} each"
    widest = sorted(range(len(domain)), key=lambda i: (-sizes[i], i))[: max(count, 1)]
    named = [f"'{domain.attributes[i]}' ({values(sizes[i])})" for i in widest]
    listed = named[0] if len(named) == 1 else ", ".join(named[:-1]) + " and " + named[-1]
    return f"its widest columns are {listed}"


def largest_cells(domain: Domain, order: int) -> int:
    """The cells of the largest marginal of ``order`` attributes (product of the largest sizes)."""
    return math.prod(sorted(domain.sizes, reverse=True)[: min(order, len(domain))])


def resource_estimate(
    domain: Domain,
    rows: int,
    *,
    model_cells: int = 0,
    fit_iterations: int = 0,
    table_cells: int = 0,
    extra_work: int = 0,
    output: OutputCost = INT64_OUTPUT,
) -> ResourceEstimate:
    """The estimate of a run that fits a model of at most ``model_cells`` cells for
    ``fit_iterations`` mirror-descent iterations in total, holds at most ``table_cells`` cells of
    tables at once and writes ``rows`` rows over ``domain`` with a sampler of cost ``output``.

    The fit and the sampling do not overlap: the peak is the tables plus the larger of the fit's
    working memory and the sampled model with its output (both with the tables kept, as a
    method may hold them until it returns)."""
    output_cells = rows * len(domain)
    model = max(model_cells, sum(domain.sizes))
    fitting = model * MODEL_BYTES_PER_CELL
    sampling = model * SAMPLING_MODEL_BYTES_PER_CELL + output.bytes(domain, rows)
    tables = table_cells * TABLE_BYTES_PER_CELL
    memory = BASE_MEMORY_BYTES + tables + max(fitting, sampling)
    additive = BASE_MEMORY_BYTES + tables + fitting + output_cells * OUTPUT_BYTES_PER_CELL
    work = (
        output_cells + sum(domain.sizes) + fit_iterations * model_cells + table_cells + extra_work
    )
    return ResourceEstimate(memory_bytes=int(memory), work=int(work), additive_bytes=int(additive))


@dataclass(frozen=True)
class SelectionCharge:
    """The privacy cost of one data-dependent choice (e.g. an exponential-mechanism draw).

    ``rho`` is what the choice is charged (for the exponential mechanism with parameter ε:
    ε²/8, Cesar & Rogers 2021); ``epsilon`` is the float actually used to weight the scores,
    chosen so that ε²/8 ≤ ``rho`` exactly (engine.selection.epsilon_for_rho).
    """

    description: str
    epsilon: float
    sensitivity: float
    rho: Fraction

    def __post_init__(self) -> None:
        if isinstance(self.rho, bool) or not isinstance(self.rho, Fraction) or self.rho <= 0:
            raise ValueError("a selection charge needs a positive exact Fraction rho")
        if not (self.epsilon > 0 and self.sensitivity > 0):
            raise ValueError("epsilon and sensitivity must be positive")
        if Fraction(self.epsilon) ** 2 / 8 > self.rho:
            raise ValueError("epsilon spends more than the charged rho")


@dataclass(frozen=True)
class GaussianCharge:
    """The privacy cost of a discrete-Gaussian release that is not a plain contingency table
    (e.g. PrivSyn's vector of InDif scores, or PPSyn's partition-cell counts).

    The released vector is integer-valued, has L2 sensitivity ``sensitivity`` (in its own units,
    under add/remove-one-row) and gets independent N_Z(0, ``sigma2``) noise per entry, which is
    ``rho = sensitivity² / (2·sigma2)``-zCDP (Canonne, Kamath, Steinke 2020); that equality is
    checked here, in exact fractions.
    """

    description: str
    sensitivity: Fraction
    sigma2: Fraction
    rho: Fraction

    def __post_init__(self) -> None:
        for name in ("sensitivity", "sigma2", "rho"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, Fraction | int):
                raise TypeError(f"{name} must be an exact Fraction")
            if value <= 0:
                raise ValueError(f"{name} must be positive")
            object.__setattr__(self, name, Fraction(value))
        if self.rho != gaussian_rho(self.sensitivity, self.sigma2):
            raise ValueError("rho must equal sensitivity² / (2·sigma2) exactly")


@dataclass(frozen=True, eq=False)
class SynthesisResult:
    """Synthetic codes (rows × attributes, domain order), the measurements that produced them,
    the charges of the data-dependent selections made on the way, and those of any other
    discrete-Gaussian releases (``releases``).

    ``axis_maps`` has one entry per measurement: for each of its attributes, the map from the
    attribute's original codes to the index along the measured axis (``None``: identity), as
    needed for measurements made on compressed codes; ``None`` overall means every axis is the
    identity. ``model`` is the re-samplable model the rows were drawn from (``None`` for a method
    that keeps none); ``extra`` holds JSON-able public facts (e.g. ``{"cliques": [...]}``)."""

    codes: npt.NDArray[np.integer[Any]]
    """Any integer type; the graphical methods give the narrowest unsigned type of the domain."""
    measurements: tuple[Measurement, ...]
    rho_used: Fraction
    estimated_total: float
    selections: tuple[SelectionCharge, ...] = ()
    releases: tuple[GaussianCharge, ...] = ()
    axis_maps: tuple[tuple[IntArray | None, ...], ...] | None = None
    model: FittedModel | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def rho_spent(self) -> Fraction:
        """The exact sum of every measurement's, selection's and release's ρ."""
        return (
            sum((m.rho for m in self.measurements), Fraction(0))
            + sum((s.rho for s in self.selections), Fraction(0))
            + sum((r.rho for r in self.releases), Fraction(0))
        )

    def __post_init__(self) -> None:
        codes = np.asarray(self.codes)
        if codes.ndim != 2 or not np.issubdtype(codes.dtype, np.integer):
            raise ValueError("codes must be a 2-D integer array")
        measurements = tuple(self.measurements)
        if not all(isinstance(m, Measurement) for m in measurements):
            raise TypeError("measurements must be Measurement objects")
        selections = tuple(self.selections)
        if not all(isinstance(s, SelectionCharge) for s in selections):
            raise TypeError("selections must be SelectionCharge objects")
        releases = tuple(self.releases)
        if not all(isinstance(r, GaussianCharge) for r in releases):
            raise TypeError("releases must be GaussianCharge objects")
        if isinstance(self.rho_used, bool) or not isinstance(self.rho_used, Fraction | int):
            raise TypeError("rho_used must be a Fraction")
        estimated_total = float(self.estimated_total)
        if not (math.isfinite(estimated_total) and estimated_total >= 0):
            raise ValueError("estimated_total must be finite and non-negative")
        # The result takes the codes over instead of copying them (a copy doubled the output's
        # memory: 1.1 GB at 10 M rows × 14 columns of int64): the array is made read-only in
        # place, so neither the mechanism nor a caller can change a released table afterwards.
        codes.flags.writeable = False
        object.__setattr__(self, "codes", codes)
        object.__setattr__(self, "measurements", measurements)
        object.__setattr__(self, "selections", selections)
        object.__setattr__(self, "releases", releases)
        object.__setattr__(self, "rho_used", Fraction(self.rho_used))
        object.__setattr__(self, "estimated_total", estimated_total)
        object.__setattr__(self, "axis_maps", self._checked_axis_maps(measurements))
        if self.model is not None and not isinstance(self.model, FittedModel):
            raise TypeError("model must be a FittedModel or None")
        try:
            extra = json.loads(json.dumps(dict(self.extra)))
        except (TypeError, ValueError):
            raise TypeError("extra must be a JSON-able mapping") from None
        object.__setattr__(self, "extra", MappingProxyType(extra))

    def _checked_axis_maps(
        self, measurements: tuple[Measurement, ...]
    ) -> tuple[tuple[IntArray | None, ...], ...] | None:
        if self.axis_maps is None:
            return None
        maps = tuple(tuple(entry) for entry in self.axis_maps)
        if len(maps) != len(measurements):
            raise ValueError("one axis-map entry per measurement")
        out: list[tuple[IntArray | None, ...]] = []
        for m, entry in zip(measurements, maps, strict=True):
            if len(entry) != len(m.attributes):
                raise ValueError("one axis map (or None) per attribute of a measurement")
            frozen: list[IntArray | None] = []
            for axis, mapping in enumerate(entry):
                if mapping is None:
                    frozen.append(None)
                    continue
                values = np.asarray(mapping)
                if (
                    values.ndim != 1
                    or values.size == 0
                    or not np.issubdtype(values.dtype, np.integer)
                    or values.min() < 0
                    or values.max() >= m.noisy_counts.shape[axis]
                ):
                    raise ValueError("an axis map is an integer vector into its measured axis")
                values = values.astype(np.int64, copy=True)
                values.flags.writeable = False
                frozen.append(values)
            out.append(tuple(frozen))
        return tuple(out)


UNIT_EXTRA_KEY = "max_rows_per_unit"
"""The key of k in ``SynthesisResult.extra`` of a run per unit of at most k rows (k > 1)."""


def per_unit_result(result: SynthesisResult, contribution_bound: int) -> SynthesisResult:
    """``result`` of a run at the row-level budget ρ_row, stated per unit of at most k rows
    (engine/privacy_unit/group.py): measurements and Gaussian releases with sensitivity k·Δ and
    ρ k²·ρ_i (σ² and the noisy values unchanged), selections with ε k·ε_i (as a float no larger
    than k·ε_i whose ε²/8 stays within the charge), sensitivity k·Δ and ρ k²·ρ_i, and
    ``rho_used`` k²·ρ_row; ``extra`` gains ``{"max_rows_per_unit": k}`` (:data:`UNIT_EXTRA_KEY`)
    so the release record and its reports can say "per person, at most k rows". k = 1 returns
    ``result`` itself."""
    k = check_contribution_bound(contribution_bound)
    if k == 1:
        return result
    measurements = tuple(
        Measurement(
            attributes=m.attributes,
            noisy_counts=m.noisy_counts,
            sigma2=m.sigma2,
            sensitivity=m.sensitivity * k,
            rho=unit_level_rho(m.rho, k),
        )
        for m in result.measurements
    )
    selections = tuple(
        SelectionCharge(
            description=s.description,
            epsilon=unit_level_epsilon(s.epsilon, s.rho, k),
            sensitivity=s.sensitivity * k,
            rho=unit_level_rho(s.rho, k),
        )
        for s in result.selections
    )
    releases = tuple(
        GaussianCharge(
            description=r.description,
            sensitivity=r.sensitivity * k,
            sigma2=r.sigma2,
            rho=unit_level_rho(r.rho, k),
        )
        for r in result.releases
    )
    return SynthesisResult(
        codes=result.codes,
        measurements=measurements,
        rho_used=unit_level_rho(result.rho_used, k),
        estimated_total=result.estimated_total,
        selections=selections,
        releases=releases,
        axis_maps=result.axis_maps,
        model=result.model,
        extra={**result.extra, UNIT_EXTRA_KEY: k},
    )


def _check_axes(name: str, result: SynthesisResult, domain: Domain) -> None:
    """Every measured axis either has the attribute's size (identity) or an axis map from all
    of its original codes: a mechanism that measured compressed codes must say so."""
    maps = result.axis_maps or tuple((None,) * len(m.attributes) for m in result.measurements)
    for m, entry in zip(result.measurements, maps, strict=True):
        for axis, (attr, mapping) in enumerate(zip(m.attributes, entry, strict=True)):
            if attr not in domain.attributes:
                raise RuntimeError(f"mechanism {name!r} measured an unknown column")
            size = domain.size(attr)
            if (mapping is None and m.noisy_counts.shape[axis] != size) or (
                mapping is not None and mapping.size != size
            ):
                raise RuntimeError(
                    f"mechanism {name!r} measured {attr!r} on other codes without an axis map"
                )


_PROGRESS_JITTER = 1e-9
_MILESTONE_STAGE_CHARS = 48


@dataclass(frozen=True)
class Milestone:
    """One step of a mechanism's public progress schedule: a stage name and the fixed fraction of
    the run it stands for.

    Both are constants of the mechanism's class, so what a milestone tells an observer is only
    that the run got this far: never a function of the data or of the noise.
    """

    stage: str
    fraction: float

    def __post_init__(self) -> None:
        if (
            not isinstance(self.stage, str)
            or not 0 < len(self.stage) <= _MILESTONE_STAGE_CHARS
            or not all(c.islower() or c.isdigit() or c == "_" for c in self.stage)
        ):
            raise ValueError(f"a milestone stage must be a short snake_case name: {self.stage!r}")
        if isinstance(self.fraction, bool) or not isinstance(self.fraction, float | int):
            raise TypeError("a milestone fraction must be a number")
        if not 0.0 <= self.fraction < 1.0:
            raise ValueError("a milestone fraction must be in [0, 1)")
        object.__setattr__(self, "fraction", float(self.fraction))


def check_milestones(milestones: Sequence[Milestone]) -> tuple[Milestone, ...]:
    """A valid public schedule: at least one :class:`Milestone`, distinct stages, fractions
    non-decreasing. Raises ``ValueError`` (a bug in the mechanism's declaration) otherwise."""
    schedule = tuple(milestones)
    if not schedule or not all(isinstance(m, Milestone) for m in schedule):
        raise ValueError("a public schedule is a non-empty sequence of Milestone objects")
    stages = [m.stage for m in schedule]
    if len(set(stages)) != len(stages):
        raise ValueError(f"milestone stages must be distinct: {stages}")
    fractions = [m.fraction for m in schedule]
    if fractions != sorted(fractions):
        raise ValueError(f"milestone fractions must be non-decreasing: {fractions}")
    return schedule


class ProgressReporter:
    """The two progress channels of one run.

    *Detail* (``reporter(fraction, stage)``): forwarded to ``callback`` with the fraction kept in
    [0, 1] and non-decreasing (a fraction below the last one is a bug and raises ``ValueError``).
    It may depend on the data and the noise (AIM's rounds move it by the budget they spent).

    *Milestones* (``reporter.milestone(stage)``): forwarded to ``on_milestone`` as ``(fraction,
    stage)`` of the declared :class:`Milestone`. Whatever order the mechanism reaches its
    milestones in, the sequence forwarded is exactly ``milestones``, in order, each once: reaching
    a milestone first forwards every earlier one not forwarded yet (a stage a data- or
    noise-dependent branch skipped is filled in), a milestone at or before the last one forwarded
    is held back, and :meth:`finish` forwards the rest. So on a completed run the milestone
    sequence is a constant of the mechanism, and on an interrupted one a prefix of it.
    Every call on either channel reaches a callback, so a callback that raises (cancellation, a
    lost lease) is consulted at every report.
    """

    def __init__(
        self,
        callback: ProgressCallback | None,
        milestones: Sequence[Milestone] = (),
        on_milestone: ProgressCallback | None = None,
    ) -> None:
        self._callback = callback
        self._fraction = 0.0
        self._stage = "start"
        self._milestones = check_milestones(milestones) if milestones else ()
        self._index = {m.stage: i for i, m in enumerate(self._milestones)}
        self._on_milestone = on_milestone
        self._reached = -1  # index of the last milestone forwarded

    @property
    def fraction(self) -> float:
        """The last fraction reported."""
        return self._fraction

    def __call__(self, fraction: float, stage: str) -> None:
        """Report ``fraction`` of the run done, now in ``stage``."""
        if not (0.0 <= fraction <= 1.0) or fraction < self._fraction - _PROGRESS_JITTER:
            raise ValueError(f"progress must be non-decreasing in [0, 1], got {fraction}")
        fraction = max(fraction, self._fraction)  # absorb float jitter (0.2 + 0.1 > 0.3)
        self._fraction = fraction
        self._stage = stage
        if self._callback is not None:
            self._callback(fraction, stage)

    def milestone(self, stage: str) -> None:
        """The run reached the declared milestone ``stage`` (``ValueError`` if it is undeclared)."""
        index = self._index.get(stage)
        if index is None:
            raise ValueError(f"{stage!r} is not one of the declared milestones")
        if index <= self._reached:
            # Held back (the public sequence never repeats or goes back); the detail callback
            # still hears from the run, so cancellation is noticed here too.
            if self._callback is not None:
                self._callback(self._fraction, self._stage)
            return
        self._forward_until(index)

    def _forward_until(self, index: int) -> None:
        while self._reached < index:
            self._reached += 1
            if self._on_milestone is not None:
                reached = self._milestones[self._reached]
                self._on_milestone(reached.fraction, reached.stage)

    def finish(self) -> None:
        """Forward every milestone not forwarded yet, then report 1.0 in the current stage unless
        that was the last report."""
        self._forward_until(len(self._milestones) - 1)
        if self._fraction < 1.0:
            self(1.0, self._stage)


class Mechanism(abc.ABC):
    """A ρ-zCDP synthesis mechanism. Subclasses implement :meth:`_synthesize`.

    Subclasses declare ``name``, ``description``, ``Params`` (a pydantic model with
    ``extra="forbid"``) and ``milestones``, their public progress schedule; callers use
    :meth:`validate_params`, :meth:`params_schema` and :meth:`run`.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    Params: ClassVar[type[BaseModel]]
    resamplable: ClassVar[bool] = False
    """Whether a run returns a re-samplable :class:`~engine.models.fitted.FittedModel` in
    ``SynthesisResult.model`` (checked by :meth:`run`); see docs/methods.md."""
    counting_cache_bytes: ClassVar[int] = 0
    """The most a run keeps of per-row counting indices between rounds (its
    :class:`~engine.marginals.MarginalCache`'s ``kept_bytes``; 0 without one): grows with the
    input rows up to this cap, so the worker's input allowance includes it (issue 24 §1)."""
    milestones: ClassVar[tuple[Milestone, ...]] = (Milestone("synthesize", 0.0),)
    """The public progress schedule: the stages an observer of the run may see, in order, each at
    a fixed fraction. A constant of the class (checked when the class is defined); the mechanism
    reports reaching them with ``progress.milestone(stage)`` and :class:`ProgressReporter` makes
    the observed sequence exactly this tuple whatever the data and the noise."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.milestones = check_milestones(cls.milestones)
        if not inspect.isabstract(cls) and (
            cls._synthesize is Mechanism._synthesize
            and cls._synthesize_counts is Mechanism._synthesize_counts
        ):
            raise TypeError(f"{cls.__name__} defines neither _synthesize nor _synthesize_counts")

    def validate_params(self, raw: Mapping[str, Any]) -> BaseModel:
        """Parse user parameters into ``Params``; raises ``pydantic.ValidationError``."""
        return self.Params.model_validate(dict(raw))

    def check_domain(self, domain: Domain, params: BaseModel) -> None:
        """Raise :class:`DomainRefused` if this method cannot run on ``domain`` with ``params``.

        Uses only the declared domain and the params (public), never data; the service calls it
        at submission, before reserving budget, and :meth:`run` calls it again. Default: accept.
        """
        del domain, params  # every domain is accepted unless a method says otherwise

    def smallest_release_rho(self, domain: Domain, params: BaseModel, rho: Fraction) -> Fraction:
        """A lower bound, over every release a run with budget ``rho`` can make (measurements,
        noisy scores, selections), of its ρ divided by its squared sensitivity: the release's
        σ² is at most 1/(2·this). Public information only. Default: ρ/d, one release per column
        (mechanisms that split ρ further override it)."""
        del params
        return rho / max(1, len(domain))

    def check_budget(
        self, domain: Domain, params: BaseModel, rho: Fraction, *, contribution_bound: int = 1
    ) -> None:
        """Raise :class:`DomainRefused` if ``rho`` is so small, for these params on this domain,
        that some release would need noise with σ² above :data:`MAX_NOISE_SIGMA2` (the sampler
        would refuse it after the charge). The service calls it at submission with the ρ it
        would reserve and the privacy unit's k (``contribution_bound``: the run spends ρ/k² at
        the row level, engine.privacy_unit.row_level_rho); :meth:`run` calls it again."""
        row_rho = row_level_rho(Fraction(rho), contribution_bound)
        smallest = self.smallest_release_rho(domain, params, row_rho)
        if smallest <= 0 or 1 / (2 * smallest) > MAX_NOISE_SIGMA2:
            raise DomainRefused(
                f"ρ = {float(rho):.3g} is too small for these params on this domain: its "
                "smallest part would need discrete Gaussian noise with σ above 2^48 (raise ρ "
                "or the smallest share, or lower rounds or candidates)"
            )

    def estimate_resources(self, domain: Domain, params: BaseModel, rows: int) -> ResourceEstimate:
        """An upper estimate of the run's peak memory and work for ``rows`` output rows
        (:class:`ResourceEstimate`; public information only). The service refuses a job whose
        estimate exceeds the per-job memory or time limit before anything is reserved. Default:
        the one-way marginals and the output (mechanisms with a model override this)."""
        del params
        return resource_estimate(domain, rows)

    def expected_work(self, domain: Domain, params: BaseModel, rows: int) -> int:
        """The work a run is expected to take, in the units of ``estimate_resources``, as the
        cost preview scales it (engine.costs): by default the bound itself. Public only."""
        return self.estimate_resources(domain, params, rows).work

    def calibration_params(self, domain: Domain) -> BaseModel:
        """The params whose runs calibrated the cost preview (engine.costs), resolved for
        ``domain``: by default the defaults. A method whose defaults changed since its
        calibration returns the params it was measured with, so that the preview scales by the
        change of work instead of assuming the defaults' time."""
        del domain
        return self.validate_params({})

    def cost_regime(self, domain: Domain, params: BaseModel) -> str | None:
        """The name of a regime whose time depends on ρ differently from the method's calibrated
        runs (the cost preview, engine.costs, fits its ρ terms apart), or None: the method's own.
        A function of the public domain and params only."""
        del domain, params
        return None

    def sampling_work(self, domain: Domain, params: BaseModel, rows: int) -> int:
        """Work units (:data:`WORK_UNITS_PER_SECOND`) of drawing ``rows`` rows from a saved model
        of this method (a derived sample), at least: :data:`SAMPLING_WORK_PER_CELL` per output
        cell by default. Public information only. The service refuses a sample whose work passes
        the time limit per job (issue 24 §5)."""
        del params
        return SAMPLING_WORK_PER_CELL * rows * len(domain)

    def first_noise(
        self, domain: Domain, params: BaseModel, rho: Fraction
    ) -> tuple[NoisePreview, ...]:
        """The first noisy releases a run with budget ``rho`` makes, in the order the run makes
        them, with their exact σ² (:class:`NoisePreview`); public information only. Mechanisms
        override it with the same budget-split code their run uses; the default, ``()``, states
        nothing."""
        del domain, params, rho
        return ()

    def noise_preview(
        self, domain: Domain, params: BaseModel, rho: Fraction, *, contribution_bound: int = 1
    ) -> tuple[NoisePreview, ...]:
        """:meth:`first_noise` of a run with budget ``rho`` per unit of at most k =
        ``contribution_bound`` rows: the releases at the row-level budget ρ/k², stated per unit
        (same σ², sensitivity k·Δ, ρ k²·ρ_row; :func:`engine.mechanisms.preview.unit_previews`).
        With k = 1 exactly ``first_noise(domain, params, rho)``. Public information only."""
        k = check_contribution_bound(contribution_bound)
        row_rho = row_level_rho(Fraction(rho), k)
        return unit_previews(self.first_noise(domain, params, row_rho), k)

    def params_schema(self) -> dict[str, Any]:
        """JSON schema of ``Params`` (for the API's documentation and the UI)."""
        return self.Params.model_json_schema()

    @property
    def runs_on_counts(self) -> bool:
        """Whether the method runs through a :class:`~engine.counting.CountingEngine`
        (:meth:`_synthesize_counts`): since issue 29 every method. They read exact counts (the
        graphical methods over codes re-coded by public maps, :func:`engine.counting.
        recoded_engine`); DPCopula-Kendall also reads its CSPRNG-chosen subsample of rows by
        position (:func:`engine.counting.codes_at`) and refuses an engine that cannot, and
        DPCopula-MLE refuses every engine but a :class:`Dataset`, before reading."""
        return type(self)._synthesize_counts is not Mechanism._synthesize_counts

    def engine_refusal(self, params: BaseModel) -> str | None:
        """Why this method with ``params`` cannot run on a counting engine other than codes in
        memory (DuckDB, Spark), or ``None`` when it can. Decided from public facts only (the
        method and its params), so the service refuses at submission what :meth:`run` would
        refuse with :class:`EngineRefused`; overridden where params matter (DPCopula-MLE)."""
        del params
        if self.runs_on_counts:
            return None
        return (
            f"method {self.name!r} reads more than counts from the data; it runs only on codes "
            "in memory, not on another counting engine"
        )

    def run(
        self,
        data: Dataset | CountingEngine,
        rho: Fraction,
        params: BaseModel,
        *,
        rng: np.random.Generator,
        rows: int | None = None,
        max_rows: int | None = None,
        progress: ProgressCallback | None = None,
        on_milestone: ProgressCallback | None = None,
        noise_source: random.Random | None = None,
        contribution_bound: int = 1,
    ) -> SynthesisResult:
        """Synthesise a dataset from ``data`` spending exactly ``rho``: ρ-zCDP for neighbours that
        differ by up to k = ``contribution_bound`` added or removed rows (one privacy unit after
        truncation to k rows, engine.privacy_unit; k = 1 is add/remove-one-row).

        Privacy per unit. The mechanism runs at the row-level budget ρ_row = ρ/k², and every
        release it made is then stated per unit (:func:`per_unit_result`): each measurement and
        Gaussian release with sensitivity k·Δ and ρ k²·ρ_i (σ² unchanged), each selection with
        ε k·ε_i, sensitivity k·Δ and ρ k²·ρ_i. A statistic with per-row sensitivity Δ on every
        table moves by at most kΔ when k rows are added or removed (triangle inequality along
        the k single-row steps), and randomised releases are covered by zCDP's group privacy
        (Bun & Steinke 2016, Proposition 27); the proof is in engine/privacy_unit/group.py. For
        counts the factor k is attained (all of a unit's rows in one cell), so no tighter bound
        holds. The stated ρ add up to k²·ρ_row = ρ exactly. With k = 1 the run is the row-level
        run, bit for bit (same noise draws given the same ``noise_source`` and ``rng``).

        ``rng`` drives post-processing only (sampling rows); DP noise comes from ``noise_source``,
        which is ``None`` (the OS CSPRNG) everywhere but in reproducibility tests. ``rows=None``
        synthesises max(1, round(N̂)) rows from the mechanism's noisy total estimate N̂;
        ``max_rows`` caps the row count (the service's output limit).

        ``progress`` receives the detailed progress, which may depend on the data and the noise;
        ``on_milestone`` receives the public schedule ``milestones``: on a completed run exactly
        that sequence, whatever the data and the noise (see :class:`ProgressReporter`).

        ``data`` is the codes in memory (a :class:`Dataset`) or, for a method that runs through
        counts (:attr:`runs_on_counts`: every method), any :class:`~engine.counting.
        CountingEngine` (DuckDB, Spark): the same exact counts (and, for DPCopula, the same
        subsample rows) give the same release, bit for bit, so every privacy claim is unchanged.
        What an engine cannot serve raises :class:`EngineRefused` before anything is read.

        Raises ``RuntimeError`` if the mechanism's measurements do not add up to exactly ``rho``,
        if a measured axis fits neither its attribute nor an axis map (``axis_maps``), or if the
        result's ``model`` disagrees with :attr:`resamplable`; exceptions from ``progress`` and
        ``on_milestone`` propagate unchanged.
        """
        if not isinstance(data, Dataset):
            if not is_counting_engine(data):  # looks nothing up on the data
                raise TypeError("data must be a Dataset or a CountingEngine")
            # The service refuses the same at submission (app/jobs/service.py).
            refusal = self.engine_refusal(params)
            if refusal is not None:
                raise EngineRefused(refusal)
        if isinstance(rho, bool) or not isinstance(rho, Fraction | int):
            raise TypeError("rho must be a Fraction (exact), not a float")
        rho = Fraction(rho)
        if rho <= 0:
            raise ValueError("rho must be positive")
        if not isinstance(params, self.Params):
            raise TypeError(f"params must be {self.Params.__name__}; use validate_params")
        if not isinstance(rng, np.random.Generator):
            raise TypeError("rng must be a numpy Generator")
        if rows is not None and (isinstance(rows, bool) or not isinstance(rows, int) or rows < 0):
            raise ValueError("rows must be None or a non-negative int")
        if max_rows is not None and (
            isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 0
        ):
            raise ValueError("max_rows must be None or a non-negative int")
        if noise_source is not None and not isinstance(noise_source, random.Random):
            raise TypeError("noise_source must be a random.Random (or None for the OS CSPRNG)")
        k = check_contribution_bound(contribution_bound)
        row_rho = row_level_rho(rho, k)

        self.check_domain(data.domain, params)
        self.check_budget(data.domain, params, rho, contribution_bound=k)
        reporter = ProgressReporter(progress, self.milestones, on_milestone)
        if isinstance(data, Dataset):
            result = self._synthesize(
                data,
                row_rho,
                params,
                rng=rng,
                rows=rows,
                max_rows=max_rows,
                progress=reporter,
                noise_source=noise_source,
            )
        else:
            result = self._synthesize_counts(
                data,
                row_rho,
                params,
                rng=rng,
                rows=rows,
                max_rows=max_rows,
                progress=reporter,
                noise_source=noise_source,
            )

        spent = result.rho_spent
        if spent != row_rho or result.rho_used != row_rho:
            raise RuntimeError(
                f"mechanism {self.name!r} measured and selected with total rho {spent} "
                f"(reported {result.rho_used}) but was given {row_rho}"
            )
        result = per_unit_result(result, k)
        if result.rho_spent != rho or result.rho_used != rho:
            raise RuntimeError(f"mechanism {self.name!r}: the per-unit charges do not add to rho")
        expected_rows = resolve_rows(rows, result.estimated_total, max_rows)
        if result.codes.shape != (expected_rows, len(data.domain)):
            raise RuntimeError(
                f"mechanism {self.name!r} returned codes of shape {result.codes.shape}, "
                f"expected {(expected_rows, len(data.domain))}"
            )
        if expected_rows and (
            result.codes.min() < 0
            or np.any(result.codes.max(axis=0) >= np.asarray(data.domain.sizes))
        ):
            raise RuntimeError(f"mechanism {self.name!r} returned codes outside the domain")
        if (result.model is not None) != self.resamplable:
            raise RuntimeError(
                f"mechanism {self.name!r} is {'' if self.resamplable else 'not '}resamplable "
                f"but returned {'a' if result.model is not None else 'no'} model"
            )
        if result.model is not None and result.model.domain != data.domain:
            raise RuntimeError(f"mechanism {self.name!r} returned a model of another domain")
        _check_axes(self.name, result, data.domain)
        reporter.finish()
        return result

    def _synthesize(
        self,
        data: Dataset,
        rho: Fraction,
        params: BaseModel,
        *,
        rng: np.random.Generator,
        rows: int | None,
        max_rows: int | None,
        progress: ProgressReporter,
        noise_source: random.Random | None,
    ) -> SynthesisResult:
        """The mechanism itself; inputs are already validated. Must measure with exactly ``rho``,
        report progress at the start and end of each stage, report each declared milestone with
        ``progress.milestone(stage)`` when it starts, and size its output with
        :func:`resolve_rows`. Every method defines it but those that read only counts, which
        define :meth:`_synthesize_counts` instead (checked when the class is defined): for them
        the codes in memory are one more counting engine."""
        return self._synthesize_counts(
            data,
            rho,
            params,
            rng=rng,
            rows=rows,
            max_rows=max_rows,
            progress=progress,
            noise_source=noise_source,
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
        """:meth:`_synthesize` through a counting engine; overridden only by the methods that
        read nothing but counts (:attr:`runs_on_counts`). Unreachable otherwise: :meth:`run`
        refuses first."""
        raise EngineRefused(f"method {self.name!r} runs only on codes in memory")
