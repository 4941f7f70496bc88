"""Keeping declared rules on synthetic rows: check, redraw from the model, then repair.

Synthetic rows are decoded (values drawn inside their bins), then every declared rule
(:mod:`engine.constraints.rules`) is checked on the decoded values. Rows that break a rule are

1. **resampled inside their bins**: the row's codes (the model's draw) are kept and only the
   decoding's values are drawn again, for at most ``rounds`` rounds; most breaks of ``end >=
   start`` are two values drawn inside the same bin in the wrong order, and this mends them
   without moving the row away from the model's codes. Rows whose bins cannot keep the rules
   are then
2. **redrawn** from the fitted model: whole rows are drawn from the model (``sampler``), decoded
   the same way, and the first ones that keep every compare and allowed rule replace the rows
   that break one, for at most ``rounds`` rounds (each round draws at most the batch's rows,
   at least 1,024, so at most ``rounds`` times the table is drawn again; only the accepted
   rows are kept, so the memory beyond one batch's decoding is about one batch more); then
3. **repaired**: each rule moves a row that still breaks it to the nearest row that keeps it,
   changing as few values as it can (:class:`RuleKeeper` lists each repair); the rules are
   repaired in order, in up to :data:`REPAIR_PASSES` passes (a repair of one rule can break
   another).

A method whose result has no re-samplable model skips step 2 (``sampler=None``); ``rounds=0``
skips steps 1 and 2 (repair only).
Sum rules are not redrawn for: values are drawn inside their bins column by column, so a total
almost never equals the sum of its parts by chance; the repair sets it (a derived column).

Privacy: this is post-processing. It reads only the synthetic rows, draws from the fitted model
(itself a DP output) and uses the declared rules, which are public; it never reads the data, so
it costs no ρ, and the counts it reports (rows that broke each rule, redrawn, repaired, left)
are functions of the model's output and may be shown to analysts. Deterministic given ``rng``
(the job's post-processing generator).

Redrawing is rejection sampling from the model conditioned on the rules (Robert & Casella,
*Monte Carlo Statistical Methods*, 2004, §2.3); unlike the repair, it moves no row off the
model's support, so it keeps the model's distribution among the rows that keep the rules.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from engine.columns import (
    BooleanColumn,
    CategoricalColumn,
    CodesColumn,
    DateColumn,
    DatetimeColumn,
    NumericColumn,
)
from engine.constraints.rules import (
    Allowed,
    Compare,
    Condition,
    Facts,
    Rule,
    Sum,
    column_facts,
    compare,
    describe,
    flip,
    rule_columns,
)

Sampler = Callable[[int, np.random.Generator], npt.NDArray[np.integer[Any]]]
"""Draws ``rows`` rows of codes from a fitted model (``FittedModel.sample``)."""

DEFAULT_ROUNDS = 10
"""Redraw rounds before the repair (the stated budget of tries)."""
REPAIR_PASSES = 4
"""Passes over the rules in the repair step."""
_PAIR_CELLS = 1 << 22  # rows × combinations × columns compared at a time in an allowed repair


class Decoder(Protocol):
    """What the keeper needs of a table schema (engine.tables.encoding.TableSchema)."""

    @property
    def columns(self) -> Any: ...

    def to_arrow(self, frame: pd.DataFrame) -> pa.Table: ...

    def encode_batch(self, batch: pa.RecordBatch | pa.Table) -> Any: ...


@dataclass
class RuleCounts:
    """Per rule: rows that broke it before, of those the rows mended by drawing their values
    again inside their bins and by replacing them with rows redrawn from the model, rows
    repaired (those left, plus rows a repair of another rule broke), rows that still break it
    (0 unless a repair of another rule undid it; reported, never hidden). So
    ``violating_before <= resampled_in_bins + redrawn + repaired + remaining``, with equality
    when no repair of another rule touches the rule's columns."""

    rule: str
    violating_before: int = 0
    resampled_in_bins: int = 0
    redrawn: int = 0
    repaired: int = 0
    remaining: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "violating_before": self.violating_before,
            "resampled_in_bins": self.resampled_in_bins,
            "redrawn": self.redrawn,
            "repaired": self.repaired,
            "remaining": self.remaining,
        }


@dataclass
class KeepReport:
    """What keeping the rules did to one synthetic table (public: see the module docstring)."""

    rules: list[RuleCounts]
    rows: int = 0
    violating_rows_before: int = 0
    resampled_rows: int = 0  # values drawn again inside the same bins (the model's codes kept)
    redrawn_rows: int = 0
    repaired_rows: int = 0
    remaining_rows: int = 0
    drawn_rows: int = 0  # rows drawn from the model by redraws (accepted or not)
    redraw: bool = True  # False: no re-samplable model, straight to repair
    rounds: int = DEFAULT_ROUNDS

    def to_json(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "violating_rows_before": self.violating_rows_before,
            "resampled_rows": self.resampled_rows,
            "redrawn_rows": self.redrawn_rows,
            "repaired_rows": self.repaired_rows,
            "remaining_rows": self.remaining_rows,
            "drawn_rows": self.drawn_rows,
            "redraw": "model" if self.redraw else "none (no re-samplable model)",
            "redraw_rounds": self.rounds,
            "rules": [counts.to_json() for counts in self.rules],
        }


# --- values in view units -----------------------------------------------------------------------


def to_view(column: Any, values: Any) -> npt.NDArray[np.float64]:
    """A decoded column in view units (see :class:`engine.constraints.rules.Facts`); NaN for a
    missing value."""
    if isinstance(column, CategoricalColumn):
        codes = np.asarray(pd.Categorical(values).codes, dtype=np.float64)
        codes[codes < 0] = np.nan
        return codes
    if isinstance(column, BooleanColumn):
        series = pd.Series(values, dtype="boolean")
        return np.asarray(series.astype("Float64").to_numpy(dtype=np.float64, na_value=np.nan))
    if isinstance(column, DateColumn | DatetimeColumn):
        unit = "D" if isinstance(column, DateColumn) else "s"
        stamps = np.asarray(pd.Series(values).to_numpy(dtype="datetime64[s]"))
        out = stamps.astype(f"datetime64[{unit}]").astype(np.int64).astype(np.float64)
        out[np.isnat(stamps)] = np.nan
        return out
    return np.asarray(pd.Series(values).to_numpy(dtype=np.float64, na_value=np.nan))


def from_view(column: Any, view: npt.NDArray[np.float64]) -> Any:
    """A column of view values as the decoder gives it (the inverse of :func:`to_view`)."""
    nulls = np.isnan(view)
    if isinstance(column, CategoricalColumn):
        codes = np.where(nulls, -1, np.nan_to_num(view, nan=-1)).astype(np.int64)
        return pd.Categorical.from_codes(
            codes, categories=pd.Index(column.labels, dtype=object), ordered=column.ordered
        )
    if isinstance(column, BooleanColumn):
        return pd.Series(pd.arrays.BooleanArray(np.nan_to_num(view) == 1, nulls))
    if isinstance(column, DateColumn | DatetimeColumn):
        unit = "D" if isinstance(column, DateColumn) else "s"
        stamps = np.nan_to_num(view).astype(np.int64).astype(f"datetime64[{unit}]")
        stamps = stamps.astype("datetime64[s]")
        stamps[nulls] = np.datetime64("NaT")
        return pd.Series(stamps)
    if isinstance(column, CodesColumn):
        return np.nan_to_num(view).astype(np.int64)
    assert isinstance(column, NumericColumn)
    if column.integer:
        whole = np.nan_to_num(view).round().astype(np.int64)
        return pd.Series(pd.arrays.IntegerArray(whole, nulls))
    rounded = view if column.decimals is None else np.round(view, column.decimals)
    return pd.Series(pd.arrays.FloatingArray(np.nan_to_num(rounded), nulls))


# --- one rule compiled against the columns --------------------------------------------------


def _on_grid(fact: Facts, values: npt.NDArray[np.float64], how: str) -> npt.NDArray[np.float64]:
    """``values`` moved onto the column's grid (``up``, ``down`` or ``nearest``) and into its
    bounds."""
    out = values
    if fact.unit is not None:
        low = float(_calendar(fact, np.array([fact.low]), "up")[0])
        high = float(_calendar(fact, np.array([fact.high]), "down")[0])
        if low > high:  # no grid value inside the bounds: the bounds win (kept encodable)
            low, high = fact.low, fact.high
        return np.clip(_calendar(fact, values, how), low, high)
    step = fact.grid
    if step is not None:
        scaled = values / step
        if how == "up":
            scaled = np.ceil(scaled - 1e-9)
        elif how == "down":
            scaled = np.floor(scaled + 1e-9)
        else:
            scaled = np.round(scaled)
        out = scaled * step
        low = math.ceil(fact.low / step - 1e-9) * step
        high = math.floor(fact.high / step + 1e-9) * step
        if fact.places is not None:  # a written grid: exactly the values the CSV shows
            out, low, high = (
                np.round(out, fact.places),
                round(low, fact.places),
                round(high, fact.places),
            )
        # The grid values inside the bounds (the 1e-9 slack above may step just past them).
        low = low + step if low < fact.low else low
        high = high - step if high > fact.high else high
        if fact.places is not None:
            low, high = round(low, fact.places), round(high, fact.places)
        if low > high or low < fact.low or high > fact.high:
            low, high = fact.low, fact.high  # no grid value inside: the bounds win (encodable)
        return np.clip(out, low, high)
    return np.clip(out, fact.low, fact.high)


def _calendar(fact: Facts, values: npt.NDArray[np.float64], how: str) -> npt.NDArray[np.float64]:
    """Dates or datetimes (view units) moved onto the column's written grid (``fact.unit``:
    days, hours, minutes, seconds, or calendar months and years) ``up``, ``down`` or to the
    ``nearest``."""
    assert fact.unit is not None
    stamps = values.astype(np.int64).astype(f"datetime64[{fact.base}]")
    floor = stamps.astype(f"datetime64[{fact.unit}]")
    down = floor.astype(f"datetime64[{fact.base}]").astype(np.int64).astype(np.float64)
    if how == "down":
        return down
    up_stamps = (floor + np.where(down < values, 1, 0)).astype(f"datetime64[{fact.base}]")
    up = up_stamps.astype(np.int64).astype(np.float64)
    if how == "up":
        return up
    return np.where(values - down <= up - values, down, up)


def _nudge(fact: Facts, values: npt.NDArray[np.float64], up: bool) -> npt.NDArray[np.float64]:
    """The next value of the column's grid above (or below) ``values``."""
    if fact.unit is not None:
        stamps = values.astype(np.int64).astype(f"datetime64[{fact.base}]")
        moved = (stamps.astype(f"datetime64[{fact.unit}]") + (1 if up else -1)).astype(
            f"datetime64[{fact.base}]"
        )
        return moved.astype(np.int64).astype(np.float64)
    step = fact.grid
    if step is not None:
        return values + (step if up else -step)
    return np.nextafter(values, np.inf if up else -np.inf)


@dataclass(frozen=True)
class _Compiled:
    rule: Rule
    facts: dict[str, Facts]
    constants: tuple[tuple[float, ...], ...] = ()  # allowed: the combinations in view units

    def applies(self, views: dict[str, npt.NDArray[np.float64]]) -> npt.NDArray[np.bool_]:
        rows = len(next(iter(views.values())))
        out = np.ones(rows, dtype=bool)
        for name in rule_columns(self.rule):
            out &= ~np.isnan(views[name])
        for condition in self.rule.when:
            out &= _holds(condition, self.facts[condition.column], views[condition.column])
        return out

    def violations(self, views: dict[str, npt.NDArray[np.float64]]) -> npt.NDArray[np.bool_]:
        """Rows that break the rule (rows it does not apply to never do), as decoded or as
        written: a continuous column with a ``"%.Nf"`` format is also checked at its N places
        (the CSV's values), so both the Parquet and the CSV output keep the rule."""
        out = self._violations(views)
        written = {
            name: _written(fact, views[name])
            for name, fact in self.facts.items()
            if fact.places is not None or fact.unit not in (None, fact.base)
        }
        if written:
            out |= self._violations({**views, **written})
        return out

    def _violations(self, views: dict[str, npt.NDArray[np.float64]]) -> npt.NDArray[np.bool_]:
        applies = self.applies(views)
        rule = self.rule
        if isinstance(rule, Compare):
            left = views[rule.left]
            right = self._right(views)
            return np.asarray(applies & ~compare(left, rule.op, right), dtype=bool)
        if isinstance(rule, Sum):
            gap = np.abs(views[rule.column] - self._parts(views))
            return np.asarray(applies & ~(gap <= self._tolerance(views)), dtype=bool)
        keys = self._keys([views[name] for name in rule.columns])
        allowed = self._keys([np.array(c) for c in zip(*self.constants, strict=True)])
        return np.asarray(applies & ~np.isin(keys, allowed), dtype=bool)

    def _right(self, views: dict[str, npt.NDArray[np.float64]]) -> Any:
        rule = self.rule
        assert isinstance(rule, Compare)
        if rule.right_column is not None:
            return views[rule.right_column]
        assert rule.value is not None
        return self.facts[rule.left].constant(rule.value, "")

    def _parts(self, views: dict[str, npt.NDArray[np.float64]]) -> npt.NDArray[np.float64]:
        assert isinstance(self.rule, Sum)
        total = np.zeros(len(views[self.rule.column]))
        for part in self.rule.parts:
            total = total + views[part]
        return total

    def _tolerance(self, views: dict[str, npt.NDArray[np.float64]]) -> Any:
        assert isinstance(self.rule, Sum)
        if self.rule.tolerance is not None:
            return self.rule.tolerance
        step = self.facts[self.rule.column].step
        if step is not None:
            return step / 2 * (1 + 1e-9)
        return 1e-9 * np.maximum(1.0, np.abs(self._parts(views)))

    def _keys(self, columns: Sequence[npt.NDArray[np.float64]]) -> npt.NDArray[np.int64]:
        assert isinstance(self.rule, Allowed)
        key = np.zeros(len(columns[0]), dtype=np.int64)
        for name, values in zip(self.rule.columns, columns, strict=True):
            size = self.facts[name].cardinality
            key = key * size + np.nan_to_num(values).astype(np.int64)
        return key

    # --- repairs ---------------------------------------------------------------------------

    def repair(self, views: dict[str, npt.NDArray[np.float64]], rows: npt.NDArray[np.intp]) -> None:
        """Move ``rows`` (which break the rule) to the nearest values that keep it, in place.

        * compare with a constant: the left value becomes the nearest value that satisfies
          (the constant, or the next grid value past it for ``<``, ``>`` and ``!=``); for a
          categorical ``!=`` the most frequent other value of the column among the table's rows;
        * compare of two columns: the left value becomes the right one (the next grid value
          past it for strict operators), kept in its declared bounds; a row that still breaks
          the rule then has its right value moved to the left one;
        * sum: the total becomes the sum (rounded to its precision, inside its bounds and the
          parts' reach); whatever is left over moves the parts in order, each inside its bounds;
        * allowed: the nearest allowed combination, by fewest changed columns (ties: the
          combination most frequent among the rows that keep the rule, then the declared order).
        """
        rule = self.rule
        if isinstance(rule, Compare):
            self._repair_compare(views, rows)
        elif isinstance(rule, Sum):
            self._repair_sum(views, rows)
        else:
            self._repair_allowed(views, rows)

    def _repair_compare(
        self, views: dict[str, npt.NDArray[np.float64]], rows: npt.NDArray[np.intp]
    ) -> None:
        rule = self.rule
        assert isinstance(rule, Compare)
        left_fact = self.facts[rule.left]
        left = views[rule.left]
        if rule.right_column is None:
            value = self._right(views)
            if left_fact.kind in ("label", "boolean") and rule.op == "!=":
                left[rows] = _most_frequent_other(left, value, left_fact.cardinality)
                return
            left[rows] = _target(left_fact, rule.op, np.full(len(rows), value))
            return
        right_fact = self.facts[rule.right_column]
        right = views[rule.right_column]
        left[rows] = _target(left_fact, rule.op, _bound(right_fact, right[rows], rule.op))
        still = rows[self.violations(views)[rows]]
        if len(still):
            other = _bound(left_fact, left[still], flip(rule.op))
            right[still] = _target(right_fact, flip(rule.op), other)

    def _repair_sum(
        self, views: dict[str, npt.NDArray[np.float64]], rows: npt.NDArray[np.intp]
    ) -> None:
        rule = self.rule
        assert isinstance(rule, Sum)
        total_fact = self.facts[rule.column]
        for part in rule.parts:  # parts written at N places are summed as written
            if self.facts[part].places is not None:
                views[part][rows] = _on_grid(self.facts[part], views[part][rows], "nearest")
        parts = self._parts(views)[rows]
        low = max(total_fact.low, sum(self.facts[p].low for p in rule.parts))
        high = min(total_fact.high, sum(self.facts[p].high for p in rule.parts))
        total = _on_grid(total_fact, np.clip(parts, low, high), "nearest")
        views[rule.column][rows] = total
        left = total - parts
        for part in rule.parts:
            fact = self.facts[part]
            values = views[part][rows]
            moved = _on_grid(fact, values + left, "nearest")
            left = left - (moved - values)
            views[part][rows] = moved

    def _repair_allowed(
        self, views: dict[str, npt.NDArray[np.float64]], rows: npt.NDArray[np.intp]
    ) -> None:
        rule = self.rule
        assert isinstance(rule, Allowed)
        combos = np.array(self.constants, dtype=np.float64)  # combinations × columns
        # Ties between equally near combinations: the most frequent among the rows that keep
        # the rule (post-processing of the synthetic rows), then the declared order.
        kept = ~self.violations(views) & self.applies(views)
        keys = self._keys([views[name][kept] for name in rule.columns])
        combo_keys = self._keys([combos[:, j] for j in range(combos.shape[1])])
        popularity = np.array([np.count_nonzero(keys == k) for k in combo_keys], dtype=np.float64)
        order = np.lexsort((np.arange(len(combos)), -popularity))
        combos = combos[order]
        current = np.stack([views[name][rows] for name in rule.columns], axis=1)
        chunk = max(1, _PAIR_CELLS // max(1, combos.size))
        chosen = np.empty(len(rows), dtype=np.intp)
        for start in range(0, len(rows), chunk):
            block = current[start : start + chunk]
            changes = (block[:, None, :] != combos[None, :, :]).sum(axis=2)
            chosen[start : start + chunk] = np.argmin(changes, axis=1)  # first of the fewest
        for j, name in enumerate(rule.columns):
            views[name][rows] = combos[chosen, j]


def _target(fact: Facts, op: str, other: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """For each ``other``, the nearest value of ``fact``'s column that is ``op other``."""
    if op == ">=":
        return _on_grid(fact, other, "up")
    if op == ">":
        return _on_grid(fact, _nudge(fact, _on_grid(fact, other, "down"), up=True), "up")
    if op == "<=":
        return _on_grid(fact, other, "down")
    if op == "<":
        return _on_grid(fact, _nudge(fact, _on_grid(fact, other, "up"), up=False), "down")
    if op == "==":
        return _on_grid(fact, other, "nearest")
    up = _on_grid(fact, _nudge(fact, other, up=True), "up")
    down = _on_grid(fact, _nudge(fact, other, up=False), "down")
    return np.where(up != other, up, down)


def _bound(fact: Facts, values: npt.NDArray[np.float64], op: str) -> npt.NDArray[np.float64]:
    """What a value compared with ``op`` must beat both as decoded and as written: for ``>``
    and ``>=`` the larger of the two (3.00 for 2.996 written at two places), for ``<`` and
    ``<=`` the smaller, else the value."""
    if fact.places is None and fact.unit in (None, fact.base):
        return values
    written = _written(fact, values)
    if op in (">", ">="):
        return np.maximum(values, written)
    if op in ("<", "<="):
        return np.minimum(values, written)
    return values


def _written(fact: Facts, values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """The values as the CSV writes them: numbers rounded half to even at ``fact.places``
    (engine.columns.output.fixed_places), dates and datetimes truncated to ``fact.unit``."""
    if fact.unit is not None:  # strftime writes a date or datetime truncated to its unit
        known = ~np.isnan(values)
        out = values.copy()
        out[known] = _calendar(fact, values[known], "down")
        return out
    assert fact.places is not None
    rounded = pc.round(pa.array(values, from_pandas=True), ndigits=fact.places)
    return np.asarray(rounded.to_numpy(zero_copy_only=False), dtype=np.float64)


def _most_frequent_other(values: npt.NDArray[np.float64], value: float, size: int) -> float:
    known = values[~np.isnan(values)].astype(np.int64)
    counts = np.bincount(known, minlength=size).astype(np.float64)
    counts[int(value)] = -1.0
    return float(np.argmax(counts))  # the first of the most frequent (declared order)


def _holds(
    condition: Condition, fact: Facts, values: npt.NDArray[np.float64]
) -> npt.NDArray[np.bool_]:
    if condition.values is not None:
        wanted = [float(v) if fact.codes else fact.constant(v, "") for v in condition.values]
        return np.isin(values, wanted)
    out = ~np.isnan(values)
    for op, value in condition.tests:
        out &= compare(values, op, fact.constant(value, ""))
    return out


def compile_rules(schema: Decoder, rules: Sequence[Rule]) -> list[_Compiled]:
    """Each rule with its columns' facts (the complete columns of ``schema``)."""
    by_name = {column.name: column for column in schema.columns}
    out = []
    for rule in rules:
        facts = {name: column_facts(by_name[name]) for name in rule_columns(rule)}
        constants: tuple[tuple[float, ...], ...] = ()
        if isinstance(rule, Allowed):
            constants = tuple(
                tuple(
                    float(v) if facts[n].codes else facts[n].constant(v, "")
                    for n, v in zip(rule.columns, combo, strict=True)
                )
                for combo in rule.combinations
            )
        out.append(_Compiled(rule, facts, constants))
    return out


# --- keeping the rules on a table, batch by batch -------------------------------------------


class RuleKeeper:
    """Keeps ``rules`` on the decoded batches of one synthetic table (see the module docstring).

    ``decode(codes)`` decodes rows the way the table's own rows were decoded (the same copula
    for linked columns, values drawn with ``rng``-seeded generators of their own); ``sampler``
    draws more rows from the fitted model (None: repair only). One keeper per table: its
    counts add up over the batches it kept.
    """

    def __init__(
        self,
        schema: Decoder,
        rules: Sequence[Rule],
        decode: Callable[[npt.NDArray[np.integer[Any]]], pd.DataFrame],
        sampler: Sampler | None,
        rng: np.random.Generator,
        *,
        rounds: int = DEFAULT_ROUNDS,
    ) -> None:
        if rounds < 0:
            raise ValueError("rounds must be ≥ 0")
        self._schema = schema
        self._compiled = compile_rules(schema, rules)
        self._decode = decode
        self._sampler = sampler
        self._rng = rng
        self._rounds = rounds
        self._columns = {column.name: column for column in schema.columns}
        self._used = sorted({n for rule in rules for n in rule_columns(rule)})
        self.report = KeepReport(
            [RuleCounts(describe(rule) if rule.name is None else rule.name) for rule in rules],
            redraw=sampler is not None,
            rounds=rounds,
        )

    def _views(self, frame: pd.DataFrame) -> dict[str, npt.NDArray[np.float64]]:
        return {name: to_view(self._columns[name], frame[name]) for name in self._used}

    def _broken(self, views: dict[str, npt.NDArray[np.float64]]) -> npt.NDArray[np.bool_]:
        """Rows that break a rule a redraw can mend (every rule but sums)."""
        rows = len(next(iter(views.values())))
        out = np.zeros(rows, dtype=bool)
        for compiled in self._compiled:
            if not isinstance(compiled.rule, Sum):
                out |= compiled.violations(views)
        return out

    def keep(
        self, codes: npt.NDArray[np.integer[Any]], frame: pd.DataFrame
    ) -> tuple[npt.NDArray[np.integer[Any]], pd.DataFrame]:
        """The batch ``codes`` and its decoded ``frame`` with every rule kept (new arrays)."""
        report = self.report
        rows = len(frame)
        report.rows += rows
        if not rows or not self._compiled:
            return codes, frame
        views = self._views(frame)
        before = [compiled.violations(views) for compiled in self._compiled]
        broken = np.zeros(rows, dtype=bool)
        for counts, mask in zip(report.rules, before, strict=True):
            counts.violating_before += int(mask.sum())
            broken |= mask
        report.violating_rows_before += int(broken.sum())
        if not broken.any():
            return codes, frame
        broken = self._broken(views)  # what a redraw is for
        codes_parts, frame_parts = [codes], [frame]
        source = np.arange(rows)
        replaced = np.zeros(rows, dtype=bool)
        offset = rows
        # First the values inside the same bins: the model's codes are kept, only the
        # decoding's draws are redone (rows whose bins cannot keep the rules stay broken).
        for _ in range(self._rounds):
            need = np.flatnonzero(broken & ~replaced)
            if not len(need):
                break
            again = codes[need]
            decoded = self._decode(again)
            ok = np.flatnonzero(~self._broken(self._views(decoded)))
            if len(ok):
                # Only the accepted rows are kept: at most the batch's rows in all rounds.
                source[need[ok]] = offset + np.arange(len(ok))
                replaced[need[ok]] = True
                codes_parts.append(again[ok])
                frame_parts.append(decoded.iloc[ok])
                offset += len(ok)
        in_bins = replaced.copy()
        report.resampled_rows += int(in_bins.sum())
        rate = max(1.0 - broken.mean(), 1 / 64)  # the share of rows that keep every rule
        for _ in range(self._rounds if self._sampler is not None else 0):
            need = np.flatnonzero(broken & ~replaced)
            if not len(need):
                break
            draw = min(max(rows, 1024), math.ceil(len(need) / rate * 1.25) + 16)
            assert self._sampler is not None
            drawn = self._sampler(draw, self._rng)
            decoded = self._decode(drawn)
            report.drawn_rows += draw
            ok = np.flatnonzero(~self._broken(self._views(decoded)))
            take = min(len(ok), len(need))
            if take:
                source[need[:take]] = offset + np.arange(take)
                replaced[need[:take]] = True
                codes_parts.append(drawn[ok[:take]])
                frame_parts.append(decoded.iloc[ok[:take]])
                offset += take
            rate = max(len(ok) / draw, 1 / 64)
        report.redrawn_rows += int((replaced & ~in_bins).sum())
        if len(codes_parts) > 1:
            dtype = np.result_type(*(part.dtype for part in codes_parts))
            codes = np.concatenate([p.astype(dtype, copy=False) for p in codes_parts])[source]
            frame = pd.concat(frame_parts, ignore_index=True).take(source)
            frame = frame.reset_index(drop=True)
            views = self._views(frame)
            # A rule counts a replaced row as mended only if the new row keeps it (a sum is
            # not redrawn for: a replaced row that still breaks it is counted in its repairs).
            for counts, compiled, mask in zip(report.rules, self._compiled, before, strict=True):
                mended = mask & replaced & ~compiled.violations(views)
                counts.resampled_in_bins += int((mended & in_bins).sum())
                counts.redrawn += int((mended & ~in_bins).sum())
        else:
            codes = codes.copy()
        changed = np.zeros(rows, dtype=bool)
        touched: set[str] = set()
        for _ in range(REPAIR_PASSES):
            any_broken = False
            for counts, compiled in zip(report.rules, self._compiled, strict=True):
                bad = np.flatnonzero(compiled.violations(views))
                if not len(bad):
                    continue
                any_broken = True
                compiled.repair(views, bad)
                counts.repaired += len(bad)
                changed[bad] = True
                touched.update(compiled.rule.columns)
            if not any_broken:
                break
        remaining = np.zeros(rows, dtype=bool)
        for counts, compiled in zip(report.rules, self._compiled, strict=True):
            mask = compiled.violations(views)
            counts.remaining += int(mask.sum())
            remaining |= mask
        report.repaired_rows += int(changed.sum())
        report.remaining_rows += int(remaining.sum())
        if touched:
            frame = frame.copy()
            for name in sorted(touched):
                frame[name] = from_view(self._columns[name], views[name])
            codes = self._recode(codes, frame, np.flatnonzero(changed))
        return codes, frame

    def _recode(
        self,
        codes: npt.NDArray[np.integer[Any]],
        frame: pd.DataFrame,
        rows: npt.NDArray[np.intp],
    ) -> npt.NDArray[np.integer[Any]]:
        """The codes of repaired rows, encoded from their new values (bins of the declared
        schema): the reports then describe the rows that were written."""
        if not len(rows):
            return codes
        subset = frame.iloc[rows].reset_index(drop=True)
        encoded = self._schema.encode_batch(self._schema.to_arrow(subset)).codes
        if encoded.size and encoded.min() < 0:
            raise RuntimeError("a repaired value fell outside its column's declared domain")
        out = codes.copy()
        out[rows] = encoded.astype(out.dtype)
        return out


__all__ = [
    "DEFAULT_ROUNDS",
    "REPAIR_PASSES",
    "KeepReport",
    "RuleCounts",
    "RuleKeeper",
    "Sampler",
    "compile_rules",
    "from_view",
    "to_view",
]
