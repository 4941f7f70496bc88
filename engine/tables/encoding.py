"""Declared table schemas and the mapping between raw values and integer codes.

Everything here is public knowledge by construction: category lists, bounds, bin edges, code
ranges and missing-value spellings come from the schema the data owner declared, never from the
data (privacy rule 5). Encoding a value that is not in the declared domain is an error counted per
column and reason; it never widens the domain. Decoding is post-processing of a synthetic table
and uses an explicit ``rng`` for its only random step (a value drawn inside its bin).

Two schema forms are accepted (the same as the service):

* a domain map ``{"col": size, ...}``: every column holds integer codes ``0..size-1`` (the format
  of the ``<name>-domain.json`` files of the benchmark datasets);
* ``{"columns": [...], "missing_values": [...]}`` (the second key optional) whose entries have
  the types ``categorical``, ``numeric``, ``date``, ``datetime``, ``boolean``, ``codes`` and
  ``ignore`` (docs/api.md lists every key; the column types live in :mod:`engine.columns`).

Entries whose bins or categories are to be discovered from the data by a DP mechanism parse into
a :class:`SchemaSpec` with pending columns; :meth:`SchemaSpec.resolve` completes it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from engine.columns import (
    DEFAULT_MISSING_VALUES,
    REASONS,
    BooleanColumn,
    CategoricalColumn,
    CodesColumn,
    Column,
    DateColumn,
    DatetimeColumn,
    DiscoveredCategories,
    IgnoredColumn,
    NumericColumn,
    Pending,
    QuantileBins,
    SchemaError,
)
from engine.columns.arrow_text import (
    encode_number_array,
    encode_text,
    is_arrow_number,
    is_arrow_text,
)
from engine.columns.base import MAX_COLUMN_NAME_LENGTH, MAX_SPELLINGS, check_spellings
from engine.columns.coupling import Coupling, fit_coupling
from engine.columns.spec import Entry, declared_lists, declared_size, parse_column
from engine.constraints.keep import DEFAULT_ROUNDS, RuleKeeper, Sampler
from engine.constraints.rules import Rule, check_rule_sizes, check_rules, parse_rules, rule_to_json
from engine.discovery.learned import LearnedBins
from engine.domain import Domain, narrowest_unsigned
from engine.privacy_unit import DEFAULT_MAX_ROWS, MAX_MAX_ROWS, PrivacyUnit
from engine.tables.buffers import null_mask

__all__ = [
    "DEFAULT_MISSING_VALUES",
    "MAX_COLUMN_NAME_LENGTH",
    "BooleanColumn",
    "CategoricalColumn",
    "CodesColumn",
    "Column",
    "DateColumn",
    "DatetimeColumn",
    "DiscoveredCategories",
    "DiscoveryRequired",
    "EncodedChunk",
    "IgnoredColumn",
    "NumericColumn",
    "QuantileBins",
    "SchemaError",
    "SchemaLimits",
    "SchemaSpec",
    "TableSchema",
    "check_schema_sizes",
    "compact_codes",
    "encode_array",
    "encode_values",
    "gather_codes",
    "schema_summary",
]


class DiscoveryRequired(SchemaError):
    """The schema asks for bins or categories learned from the data (not resolved yet)."""

    def __init__(self, pending: Sequence[Pending]) -> None:
        parts = [
            f"quantile bins for column {p.name!r}"
            if isinstance(p, QuantileBins)
            else f"categories for column {p.name!r}"
            for p in pending
        ]
        super().__init__("DP discovery of " + ", ".join(parts) + " has not run yet")
        self.pending = tuple(pending)


DECODE_BATCH_ROWS = 262_144
"""Rows decoded and converted to Arrow at a time when writing a synthetic table."""


@dataclass(frozen=True)
class SchemaLimits:
    """Size limits checked on the raw JSON of a schema *before* anything is built from it.

    ``max_columns`` bounds the number of columns, ``max_domain_size`` the codes of one column
    (categories, bins or size) and ``max_total_domain_size`` the codes of all columns together
    (every numeric bin becomes a stored edge, so this bounds the parsed schema's memory). Each
    check compares a length or a number taken from the JSON with its limit, so a schema that
    declares ``"bins": 30000000`` is refused without allocating 30 million edges.
    """

    max_columns: int
    max_domain_size: int
    max_total_domain_size: int

    def __post_init__(self) -> None:
        if min(self.max_columns, self.max_domain_size, self.max_total_domain_size) < 1:
            raise ValueError("schema limits must be positive")


@dataclass(frozen=True)
class EncodedChunk:
    """Codes for a chunk of rows; per column the rows refused, and per (column, reason) too."""

    codes: np.ndarray
    invalid_rows: Mapping[str, int]
    problems: Mapping[tuple[str, int], int] = field(default_factory=dict)


def _check_unique(names: Sequence[str]) -> None:
    seen: set[str] = set()
    duplicates: set[str] = set()
    for name in names:
        (duplicates if name in seen else seen).add(name)
    if duplicates:
        shown = ", ".join(map(repr, sorted(duplicates)[:20]))
        raise SchemaError(f"duplicate column names: {shown}")


def _discovered(raw: Mapping[str, Any]) -> tuple[str, ...]:
    names = raw.get("discovered", [])
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise SchemaError("discovered must be a list of column names")
    return tuple(names)


def _check_discovered(discovered: Sequence[str], entries: Sequence[Entry]) -> None:
    stored = {e.name for e in entries if not isinstance(e, IgnoredColumn)}
    if len(set(discovered)) != len(discovered) or not set(discovered) <= stored:
        raise SchemaError("discovered must name distinct stored columns")


def _rules(raw: Mapping[str, Any]) -> tuple[Rule, ...]:
    """The declared cross-column rules (engine.constraints): public, checked against the
    columns when the schema is built."""
    if "rules" not in raw:
        return ()
    return parse_rules(raw["rules"])


def parse_privacy_unit(
    raw: Mapping[str, Any], entries: tuple[Entry, ...]
) -> tuple[tuple[Entry, ...], PrivacyUnit | None]:
    """The schema's ``"privacy_unit": {"column": name, "max_rows": k}`` (k optional:
    :data:`~engine.privacy_unit.DEFAULT_MAX_ROWS`), and the entries with the unit's column turned
    into an ignored one: it may be declared as any type, but it is read for truncation only and
    never stored, encoded or released. Only public facts (the schema's own text) are checked."""
    if "privacy_unit" not in raw:
        return entries, None
    value = raw["privacy_unit"]
    if not isinstance(value, Mapping):
        raise SchemaError('privacy_unit must be an object {"column": <name>, "max_rows": <k>}')
    unknown = sorted(str(key) for key in set(value) - {"column", "max_rows"})
    if unknown:
        shown_keys = ", ".join(map(repr, unknown))
        raise SchemaError(f"privacy_unit has no keys but column and max_rows (not {shown_keys})")
    column = value.get("column")
    if not isinstance(column, str) or not column:
        raise SchemaError("privacy_unit: column must be the name of a column in columns")
    k = value.get("max_rows", DEFAULT_MAX_ROWS)
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_MAX_ROWS:
        raise SchemaError(f"privacy_unit: max_rows must be an integer from 1 to {MAX_MAX_ROWS}")
    shown = column[:MAX_COLUMN_NAME_LENGTH]
    if not any(entry.name == column for entry in entries):
        raise SchemaError(f"privacy_unit: column {shown!r} is not in columns")
    if column in _discovered(raw):
        raise SchemaError(f"privacy_unit: column {shown!r} cannot be a discovered column")
    stored = [e for e in entries if not isinstance(e, IgnoredColumn) and e.name != column]
    if not stored:
        raise SchemaError(
            f"privacy_unit: column {shown!r} is never stored; declare at least one other column"
        )
    swapped = tuple(IgnoredColumn(e.name) if e.name == column else e for e in entries)
    return swapped, PrivacyUnit(column, k)


def _check_unit(unit: PrivacyUnit | None, entries: Sequence[Entry]) -> None:
    if unit is None:
        return
    if not any(isinstance(e, IgnoredColumn) and e.name == unit.column for e in entries):
        raise SchemaError(f"privacy_unit: column {unit.column!r} must be an ignored entry")


def _missing_values(raw: Mapping[str, Any]) -> tuple[str, ...]:
    if "missing_values" not in raw:
        return DEFAULT_MISSING_VALUES
    return check_spellings(raw["missing_values"], "missing_values", None)


@dataclass(frozen=True)
class SchemaSpec:
    """A parsed schema that may still have pending (to be discovered) columns."""

    entries: tuple[Entry, ...]
    missing_values: tuple[str, ...] = DEFAULT_MISSING_VALUES
    # Stored columns whose bins or categories were learned with DP at upload (not declared).
    discovered: tuple[str, ...] = ()
    # The column naming each row's person or account, and the bound k on its rows (issue 28
    # §1): an ignored entry here (read for truncation only, never stored).
    privacy_unit: PrivacyUnit | None = None
    # Declared cross-column rules the synthetic rows keep (engine.constraints; public).
    rules: tuple[Rule, ...] = ()

    def __post_init__(self) -> None:
        _check_unique([entry.name for entry in self.entries])
        _check_discovered(self.discovered, self.entries)
        _check_unit(self.privacy_unit, self.entries)
        if not any(not isinstance(entry, IgnoredColumn) for entry in self.entries):
            raise SchemaError("the schema declares no columns to store")
        check_rules(self.rules, self.entries, learned=self.discovered)

    @property
    def pending(self) -> tuple[Pending, ...]:
        return tuple(e for e in self.entries if isinstance(e, QuantileBins | DiscoveredCategories))

    @classmethod
    def from_json(cls, raw: Any, limits: SchemaLimits | None = None) -> SchemaSpec:
        """Parse either schema form; raise :class:`SchemaError` with a precise message.

        With ``limits``, every size is checked against them on the raw JSON first, in one linear
        pass that allocates nothing in proportion to a declared size.
        """
        if not isinstance(raw, Mapping):
            raise SchemaError("the schema must be a JSON object")
        if limits is not None:
            check_schema_sizes(raw, limits)
        if "columns" in raw and isinstance(raw["columns"], list):
            keys = {"columns", "missing_values", "discovered", "privacy_unit", "rules"}
            if not set(raw) <= keys:
                raise SchemaError(
                    'a {"columns": [...]} schema has no keys but columns, missing_values, '
                    "privacy_unit and rules"
                )
            entries = tuple(parse_column(entry, i) for i, entry in enumerate(raw["columns"]))
            if not entries:
                raise SchemaError("the schema declares no columns")
            entries, unit = parse_privacy_unit(raw, entries)
            return cls(entries, _missing_values(raw), _discovered(raw), unit, rules=_rules(raw))
        columns: list[Entry] = []
        for name, size in raw.items():
            if isinstance(size, bool) or not isinstance(size, int):
                raise SchemaError(
                    f"column {name!r}: a domain map gives each column an integer size "
                    '(or use the {"columns": [...]} form)'
                )
            columns.append(CodesColumn(str(name), size))
        if not columns:
            raise SchemaError("the schema declares no columns")
        return cls(tuple(columns))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"columns": [entry.to_json() for entry in self.entries]}
        if self.missing_values != DEFAULT_MISSING_VALUES:
            out["missing_values"] = list(self.missing_values)
        if self.discovered:
            out["discovered"] = list(self.discovered)
        if self.privacy_unit is not None:
            out["privacy_unit"] = self.privacy_unit.to_json()
        if self.rules:
            out["rules"] = [rule_to_json(rule) for rule in self.rules]
        return out

    def complete(self) -> TableSchema:
        """The table schema; :class:`DiscoveryRequired` while a column is pending."""
        if self.pending:
            raise DiscoveryRequired(self.pending)
        return self.resolve({})

    def resolve(
        self,
        discovered: Mapping[str, Sequence[Any]],
        *,
        learned: Sequence[str] | None = None,
        learned_bins: Mapping[str, LearnedBins] | None = None,
    ) -> TableSchema:
        """Complete the pending columns with what a DP mechanism discovered.

        ``discovered[name]`` is, for :class:`QuantileBins`, the inner cut points (in the units of
        :meth:`QuantileBins.values`) and, for :class:`DiscoveredCategories`, the categories;
        ``learned_bins[name]`` is a learned range's release (its edges and value profile), used
        instead. ``learned`` names the pending columns a mechanism actually released (and charged
        for); only those are marked discovered (default: every pending column).
        """
        ranges = learned_bins or {}
        missing = [
            p.name for p in self.pending if p.name not in discovered and p.name not in ranges
        ]
        if missing:
            raise DiscoveryRequired([p for p in self.pending if p.name in missing])
        columns: list[Column] = []
        for entry in self.entries:
            if isinstance(entry, QuantileBins) and entry.name in ranges:
                columns.append(entry.resolve_learned(ranges[entry.name]))
            elif isinstance(entry, QuantileBins | DiscoveredCategories):
                columns.append(entry.resolve(discovered[entry.name]))
            elif not isinstance(entry, IgnoredColumn):
                columns.append(entry)
        ignored = tuple(e.name for e in self.entries if isinstance(e, IgnoredColumn))
        pending = tuple(p.name for p in self.pending)
        if learned is not None and not set(learned) <= set(pending):
            raise SchemaError("only pending columns can be learned")
        marked = pending if learned is None else tuple(n for n in pending if n in set(learned))
        return TableSchema(
            tuple(columns),
            ignored,
            self.missing_values,
            self.discovered + marked,
            rules=self.rules,
        )


@dataclass(frozen=True)
class TableSchema:
    """A complete declared schema: the stored columns (the domain), in order, with distinct
    names; the file's columns that are dropped while reading; the missing-value spellings."""

    columns: tuple[Column, ...]
    ignored: tuple[str, ...] = ()
    missing_values: tuple[str, ...] = DEFAULT_MISSING_VALUES
    # Columns whose bins or categories were learned with DP at upload; the rest were declared.
    discovered: tuple[str, ...] = ()
    # Declared cross-column rules the synthetic rows keep (engine.constraints; public).
    rules: tuple[Rule, ...] = ()

    def __post_init__(self) -> None:
        if not self.columns:
            raise SchemaError("the schema declares no columns")
        _check_unique([*self.names, *self.ignored])
        _check_discovered(self.discovered, self.columns)
        check_rules(
            self.rules,
            [*self.columns, *(IgnoredColumn(n) for n in self.ignored)],
            learned=self.discovered,
        )

    @property
    def names(self) -> tuple[str, ...]:
        """The stored columns' names (ignored columns are not among them)."""
        return tuple(column.name for column in self.columns)

    @property
    def file_names(self) -> tuple[str, ...]:
        """Every column an uploaded file must have: the stored ones and the ignored ones."""
        return self.names + self.ignored

    def column(self, name: str) -> Column:
        for column in self.columns:
            if column.name == name:
                return column
        raise KeyError(name)

    def domain(self) -> Domain:
        """The engine's view: column names and sizes, nothing else."""
        return Domain(self.names, tuple(column.size for column in self.columns))

    def to_json(self) -> dict[str, Any]:
        """The normalised ``{"columns": [...]}`` form (bins as explicit edges, ignored last)."""
        entries: list[Entry] = [*self.columns, *(IgnoredColumn(n) for n in self.ignored)]
        return SchemaSpec(
            tuple(entries), self.missing_values, self.discovered, rules=self.rules
        ).to_json()

    @classmethod
    def from_json(cls, raw: Any, limits: SchemaLimits | None = None) -> TableSchema:
        """Parse either schema form (see :meth:`SchemaSpec.from_json`); refuse pending columns."""
        return SchemaSpec.from_json(raw, limits).complete()

    @classmethod
    def from_domain(cls, domain: Domain) -> TableSchema:
        return cls(
            tuple(CodesColumn(a, s) for a, s in zip(domain.attributes, domain.sizes, strict=True))
        )

    def encode(self, frame: pd.DataFrame) -> EncodedChunk:
        """Encode a chunk holding at least this schema's stored columns (any order).

        Values may be text (CSV) or typed (Parquet). Refused rows get a negative code (the
        reason, see :mod:`engine.columns.base`) and are counted per column and per reason.
        """
        return self._encode_columns(
            len(frame),
            lambda column: encode_values(column, frame[column.name], self.missing_values),
        )

    def encode_batch(self, batch: pa.RecordBatch | pa.Table) -> EncodedChunk:
        """:meth:`encode` for Arrow data: text and number columns are encoded in Arrow (the
        same codes, see :func:`encode_array`)."""
        return self._encode_columns(
            batch.num_rows,
            lambda column: encode_array(column, batch.column(column.name), self.missing_values),
        )

    def encode_columns(
        self, batch: pa.RecordBatch | pa.Table
    ) -> tuple[list[np.ndarray], dict[tuple[str, int], int]]:
        """:meth:`encode_batch` column by column, without a 2-D copy: each column's codes (in
        the narrowest unsigned type that holds the column's codes when none was refused, else
        a signed type with the negative reasons), and the refused rows per (column, reason)."""
        out: list[np.ndarray] = []
        problems: dict[tuple[str, int], int] = {}
        for column in self.columns:
            codes = encode_array(column, batch.column(column.name), self.missing_values)
            reasons = count_reasons(codes)
            for reason, count in reasons.items():
                problems[(column.name, reason)] = count
            out.append(codes if reasons else compact_codes(codes, column.size))
        return out, problems

    def _encode_columns(
        self, rows: int, encode_column: Callable[[Column], np.ndarray]
    ) -> EncodedChunk:
        # Column-major: each column's codes are written to contiguous memory.
        codes = np.empty((rows, len(self.columns)), dtype=np.int64, order="F")
        invalid: dict[str, int] = {}
        problems: dict[tuple[str, int], int] = {}
        for j, column in enumerate(self.columns):
            col_codes = encode_column(column)
            for reason, count in count_reasons(col_codes).items():
                problems[(column.name, reason)] = count
                invalid[column.name] = invalid.get(column.name, 0) + count
            codes[:, j] = col_codes
        return EncodedChunk(codes, invalid, problems)

    def describe_problems(self, problems: Mapping[tuple[str, int], int]) -> str:
        """One refusal message: per column (schema order) and reason, a row count, no values."""
        order = {name: i for i, name in enumerate(self.names)}
        parts = [
            f"column {name!r}: {self.column(name).problem(reason, count)}"
            for (name, reason), count in sorted(
                problems.items(), key=lambda item: (order[item[0][0]], -item[0][1])
            )
            if count
        ]
        return "values do not match the schema: " + "; ".join(parts)

    def decode(self, codes: np.ndarray, rng: np.random.Generator) -> pd.DataFrame:
        """Turn a synthetic table of codes back into the original value space.

        Categories become their declared labels (pandas categorical, ordered if declared),
        codes stay codes, booleans become pandas ``boolean``, numeric bins become a value drawn
        inside the bin (``Float64``, or ``Int64`` for integer columns), dates and datetimes
        ``datetime64[s]`` at the column's resolution; null codes become missing values. The
        draws are post-processing with the job's seeded ``rng``: each column draws from its own
        generator seeded from ``rng`` (:meth:`column_generators`), so decoding in row batches
        (:meth:`decode_batches`) gives the same values as decoding at once.
        """
        self._check_codes(codes)
        return self._decode(codes, self.column_generators(rng), self.coupling(codes))

    def column_generators(self, rng: np.random.Generator) -> list[np.random.Generator]:
        """One generator per column, seeded from ``rng`` (one draw per column)."""
        seeds = rng.integers(0, 2**63, size=len(self.columns), dtype=np.int64)
        return [np.random.default_rng(int(seed)) for seed in seeds]

    def decode_batches(
        self, codes: np.ndarray, rng: np.random.Generator, batch_rows: int = DECODE_BATCH_ROWS
    ) -> Iterator[pa.Table]:
        """:meth:`decode` then :meth:`to_arrow`, ``batch_rows`` rows at a time (memory bounded
        per batch); the concatenated batches equal the one-shot decode with the same ``rng``."""
        if batch_rows < 1:
            raise ValueError("batch_rows must be positive")
        self._check_codes(codes)
        generators = self.column_generators(rng)
        coupling = self.coupling(codes)
        for start in range(0, codes.shape[0], batch_rows):
            batch = codes[start : start + batch_rows]
            yield self.to_arrow(self._decode(batch, generators, coupling))

    def kept_batches(
        self,
        codes: np.ndarray,
        rng: np.random.Generator,
        sampler: Sampler | None,
        batch_rows: int = DECODE_BATCH_ROWS,
        rounds: int = DEFAULT_ROUNDS,
    ) -> tuple[RuleKeeper, Iterator[tuple[np.ndarray, pa.Table]]]:
        """:meth:`decode_batches` keeping the declared :attr:`rules` (engine.constraints.keep):
        each batch's rows that break a rule are redrawn with ``sampler`` (the fitted model; None:
        repair only), then repaired. Yields each batch's codes (as kept) with its Arrow table;
        the keeper's ``report`` counts what was done once the batches are consumed.

        Post-processing with the job's ``rng``: the table's own values are drawn as in
        :meth:`decode_batches` (same generators), redrawn rows with generators of their own
        seeded after them, so a run is deterministic given ``rng``.
        """
        if batch_rows < 1:
            raise ValueError("batch_rows must be positive")
        self._check_codes(codes)
        generators = self.column_generators(rng)
        coupling = self.coupling(codes)
        redraw_rng = np.random.default_rng(int(rng.integers(0, 2**63)))
        redraw_generators = self.column_generators(redraw_rng)
        keeper = RuleKeeper(
            self,
            self.rules,
            lambda drawn: self._decode(drawn, redraw_generators, coupling),
            sampler,
            redraw_rng,
            rounds=rounds,
        )

        def batches() -> Iterator[tuple[np.ndarray, pa.Table]]:
            for start in range(0, codes.shape[0], batch_rows):
                batch = codes[start : start + batch_rows]
                kept, frame = keeper.keep(batch, self._decode(batch, generators, coupling))
                yield kept, self.to_arrow(frame)

        return keeper, batches()

    def coupling(self, codes: np.ndarray) -> Coupling | None:
        """The copula that draws values inside the bins of linked numeric, date and datetime
        columns jointly (engine.columns.coupling), estimated from the synthetic ``codes``
        (post-processing); None when fewer than two columns are linked. Read in blocks of
        :data:`DECODE_BATCH_ROWS` whatever the decoding batch, so the estimate (and so every
        draw) does not depend on it."""
        step = DECODE_BATCH_ROWS
        leveled = [
            column if isinstance(column, NumericColumn | DateColumn | DatetimeColumn) else None
            for column in self.columns
        ]
        blocks = (codes[start : start + step] for start in range(0, codes.shape[0], step))
        return fit_coupling(leveled, blocks)

    def _check_codes(self, codes: np.ndarray) -> None:
        if codes.ndim != 2 or codes.shape[1] != len(self.columns):
            raise ValueError("codes must be a 2-D array with one column per schema column")

    def _decode(
        self,
        codes: np.ndarray,
        generators: Sequence[np.random.Generator],
        coupling: Coupling | None,
    ) -> pd.DataFrame:
        data: dict[str, Any] = {}
        draws = {} if coupling is None else coupling.draws(codes, generators)
        for j, (column, generator) in enumerate(zip(self.columns, generators, strict=True)):
            col = np.asarray(codes[:, j], dtype=np.int64)
            if j in draws:
                assert isinstance(column, NumericColumn | DateColumn | DatetimeColumn)
                data[column.name] = column.decode(col, generator, draws[j])
            else:
                data[column.name] = column.decode(col, generator)
        return pd.DataFrame(data, columns=list(self.names))

    def arrow_schema(self) -> pa.Schema:
        """The output schema: each column's Arrow type, spellings and format as field metadata."""
        return pa.schema([column.arrow_field() for column in self.columns])

    def to_arrow(self, frame: pd.DataFrame) -> pa.Table:
        """A decoded frame as an Arrow table with the declared output types."""
        arrays = []
        for column, target in zip(self.columns, self.arrow_schema(), strict=True):
            values = frame[column.name]
            if isinstance(column, DateColumn):
                array = pa.array(values, type=pa.timestamp("s")).cast(pa.date32())
            elif isinstance(column, CategoricalColumn):
                array = pa.array(values).cast(target.type)
            else:
                array = pa.array(values, type=target.type)
            arrays.append(array)
        return pa.Table.from_arrays(arrays, schema=self.arrow_schema())


def compact_codes(codes: np.ndarray, size: int) -> np.ndarray:
    """Valid codes ``0..size-1`` in the narrowest unsigned integer type that holds them (a
    view of signed codes of that width: valid codes are never negative)."""
    kind = narrowest_unsigned(size)
    if codes.dtype.kind == "i" and codes.dtype.itemsize == kind.itemsize:
        return codes.view(kind)
    return codes.astype(kind, copy=False)


def count_reasons(codes: np.ndarray) -> dict[int, int]:
    """How many codes carry each refusal reason (negative codes)."""
    if codes.dtype.kind == "u" or not codes.size or codes.min() >= 0:
        return {}
    bad = codes[codes < 0]
    if not bad.size:
        return {}
    counts = np.bincount(-bad, minlength=-min(REASONS) + 1)
    return {reason: int(counts[-reason]) for reason in REASONS if counts[-reason]}


def check_schema_sizes(raw: Mapping[str, Any], limits: SchemaLimits) -> None:
    """Refuse a raw schema whose declared sizes exceed ``limits``, before it is parsed.

    Only lengths of JSON lists and integers are compared (a calendar unit's bin count is
    computed from its two bounds); malformed entries are left to the parser, which gives the
    precise message.
    """
    entries = raw.get("columns") if "columns" in raw else None
    if isinstance(entries, list):
        count = len(entries)
        sized = [(_entry_name(entry, i), declared_size(entry)) for i, entry in enumerate(entries)]
        lists = [(_entry_name(entry, i), declared_lists(entry)) for i, entry in enumerate(entries)]
    else:
        count = len(raw)
        sized = [(str(name), size) for name, size in raw.items()]
        lists = []
    if count > limits.max_columns:
        raise SchemaError(f"the schema declares more than {limits.max_columns} columns")
    check_rule_sizes(raw.get("rules"))
    spellings = raw.get("missing_values")
    if isinstance(spellings, list) and len(spellings) > MAX_SPELLINGS:
        raise SchemaError(f"missing_values are limited to {MAX_SPELLINGS} entries")
    for name, length in lists:
        if length > limits.max_domain_size:
            raise SchemaError(
                f"column {name!r} lists {length} candidates or profile points; the limit is "
                f"{limits.max_domain_size}"
            )
    total = 0
    for name, size in sized:
        if isinstance(size, bool) or not isinstance(size, int):
            continue  # not a size: the parser explains what is wrong with it
        if size > limits.max_domain_size:
            raise SchemaError(
                f"column {name!r} has {size} values; the limit is {limits.max_domain_size}"
            )
        total += max(size, 0)
    if total > limits.max_total_domain_size:
        raise SchemaError(
            f"the columns declare {total} values in total; the limit is "
            f"{limits.max_total_domain_size}"
        )


def _entry_name(entry: Any, position: int) -> str:
    name = entry.get("name") if isinstance(entry, Mapping) else None
    return name[:MAX_COLUMN_NAME_LENGTH] if isinstance(name, str) else f"columns[{position}]"


def encode_values(
    column: Column, values: pd.Series, missing: Sequence[str] = DEFAULT_MISSING_VALUES
) -> np.ndarray:
    """The codes of one column's values; a refused value gets its negative reason code.

    ``missing`` are the spellings read as a missing value (nulls and NaN always are).
    """
    if isinstance(values.dtype, pd.CategoricalDtype):
        # A dictionary-encoded input (Parquet): encode each distinct value once, then gather.
        distinct = encode_values(column, pd.Series(values.cat.categories), missing)
        positions = values.cat.codes.to_numpy(dtype=np.int64)
        gathered = distinct[np.maximum(positions, 0)] if len(distinct) else positions
        return np.where(positions >= 0, gathered, column.absent_code).astype(np.int64)
    return column.encode(values.reset_index(drop=True), missing)


def encode_array(
    column: Column,
    values: pa.Array | pa.ChunkedArray,
    missing: Sequence[str] = DEFAULT_MISSING_VALUES,
) -> np.ndarray:
    """:func:`encode_values` for an Arrow array: the same codes, whole arrays at a time.

    Text arrays of numeric, codes, categorical and boolean columns, and integer or float arrays
    of numeric, codes and categorical columns, are encoded in Arrow
    (:mod:`engine.columns.arrow_text`); text, ``date32`` and timestamp arrays of date and
    datetime columns too (:mod:`engine.columns.arrow_temporal`); a dictionary array encodes
    its dictionary once and gathers; anything else goes through pandas.
    """
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if isinstance(values, pa.DictionaryArray):
        distinct = encode_array(column, values.dictionary, missing)
        if distinct.size and distinct.dtype.kind == "i" and distinct.min() >= 0:
            distinct = compact_codes(distinct, column.size)
        return gather_codes(distinct, values.indices, column.absent_code)
    if is_arrow_text(values.type) and isinstance(
        column, NumericColumn | CodesColumn | CategoricalColumn | BooleanColumn
    ):
        return encode_text(column, values, missing)
    if is_arrow_number(values.type) and isinstance(
        column, NumericColumn | CodesColumn | CategoricalColumn
    ):
        codes = encode_number_array(column, values, missing)
        if codes is not None:
            return codes
    if isinstance(column, DateColumn | DatetimeColumn):
        codes = column.encode_arrow(values, missing)
        if codes is not None:
            return codes
    return encode_values(column, values.to_pandas(), missing)


def gather_codes(distinct: np.ndarray, indices: pa.Array, absent_code: int) -> np.ndarray:
    """The codes of a dictionary array from its entries' codes ``distinct`` and its
    ``indices``; a null index is a missing value (``absent_code``). Without nulls the result
    has the type of ``distinct`` (int64 if the type cannot hold ``absent_code``)."""
    if not indices.null_count:
        return distinct.take(np.asarray(indices.to_numpy()))  # the indices: a view
    positions = np.asarray(pc.fill_null(indices, 0).to_numpy(), dtype=np.intp)
    codes = distinct.take(positions) if distinct.size else np.zeros(len(indices), np.int64)
    if not np.can_cast(np.min_scalar_type(absent_code), codes.dtype):
        codes = codes.astype(np.int64)
    codes[null_mask(indices)] = absent_code
    return codes


def schema_summary(columns: Sequence[Column]) -> list[dict[str, Any]]:
    """The public description of each column (everything in it was declared by the owner)."""
    summary: list[dict[str, Any]] = []
    for column in columns:
        entry = column.to_json()
        entry["size"] = column.size
        summary.append(entry)
    return summary
