"""The owner tier of a quality report: the synthetic table compared with the real one.

Privacy. This tier READS THE REAL TABLE and releases nothing under differential privacy: its
numbers (TVDs, correlations, exact matches, distances to the closest record) are exact functions
of the real rows and may reveal them. It is for the data owner only (privacy rule 7) and must
never be stored where analysts can reach it. ``rng`` drives only the subsampling and the holdout
split of this diagnostic.

The exact-match and distance-to-closest-record (DCR) checks are a utility-and-disclosure
diagnostic, not a privacy guarantee: the guarantee is the release's (ε, δ) / ρ statement.

The report opens with a verdict on VALUES (engine/reports/values.py): given the real table's raw
values and the synthetic decoded values, each numeric, date and datetime column is compared on its
values (range, KS, moments, quantiles, missing rates) and the worst columns are named. The
k-marginal score compares bin codes only; it is kept, but never presented as the verdict when the
value metrics miss. Without real values (a dataset stored before they were kept) the report says
so and compares bins, as before.

Every step is bounded for million-row tables: marginals are counted with ``np.bincount`` or
sorted keys (no full-domain tables beyond :data:`engine.evaluation.DENSE_CELL_LIMIT` cells), the
number of column subsets and pairs is capped (random samples drawn with ``rng``), correlations and
DCR run on row subsamples, and DCR is computed in chunks of at most :data:`DCR_CHUNK_CELLS`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
from scipy.stats import rankdata

from engine.columns.categorical import BooleanColumn, CategoricalColumn
from engine.columns.numeric import NumericColumn
from engine.columns.spec import Column
from engine.columns.temporal import DateColumn, DatetimeColumn
from engine.domain import Dataset
from engine.evaluation import marginal_tvd, mean_tvd
from engine.reports.common import (
    MAX_CODES_SHOWN,
    MAX_DISTRIBUTION_COLUMNS,
    MAX_MATRIX_COLUMNS,
    REST_LABEL,
    Codes,
    FloatArray,
    IntArray,
    cap_note,
    check_codes,
    column_labels,
    fold,
    matrix_columns,
    rounded,
    rounded_list,
    shares,
    shown_codes,
)
from engine.reports.values import (
    MAX_VALUE_ROWS,
    ValueComparison,
    ValuesMismatch,
    ValueSource,
    compare_values,
    unavailable,
    verdict,
)
from engine.tables.encoding import TableSchema
from engine.tables.raw_values import value_columns

MAX_SUBSETS_PER_K = 300
"""Mean k-way TVDs average over every k-subset of columns when there are at most this many,
else over this many subsets drawn uniformly without replacement (``rng``)."""
MAX_TVD_PAIRS = 500
"""Per-pair TVDs (for the worst pairs) are computed on all pairs or on a sample of this many."""
WORST_PAIRS = 10
MAX_DCR_QUERIES = 2_000
"""Rows whose distance to the closest record is computed, per side (synthetic, holdout)."""
DCR_CHUNK_CELLS = 1 << 22
MAX_ROWS_COUNTED = 2_000_000
"""Marginals, distributions, missing rates and novel combinations count every row of a table
up to this many, else a uniform sample of this many rows drawn without replacement (``rng``):
at 10 M rows, counting 300 subsets per k on both whole tables kept a worker busy for more than
ten minutes after each release (docs/benchmarks.md, "Scale"). The sampling error this adds to
a k-way TVD is of the order of √(cells / rows counted)."""
"""Query rows × reference rows held in memory at once by the DCR computation."""
MIN_CORRELATION_ROWS = 3

EXPLANATIONS: dict[str, str] = {
    "verdict": "The headline, from the value metrics below: the numeric and date columns whose "
    "synthetic values are furthest from the real ones, and whether any column misses the "
    "thresholds (more than 1 % of synthetic values outside the real range, a KS statistic above "
    "0.1, or a missing-rate gap above 0.05). The k-marginal score compares bins, not values.",
    "values": "Per numeric, date and datetime column, real values against the synthetic values "
    "analysts download (dates in days, datetimes in seconds since 1970-01-01). Ranges, shares "
    "outside the real range and missing rates count every row; the other numbers use a uniform "
    "sample of rows of each table.",
    "outside_share": "Share of the synthetic values below the real minimum or above the real "
    "maximum. Real data never lies there, so anything above about 1 % means values an analyst "
    "would find implausible.",
    "ks": "Kolmogorov–Smirnov statistic: the largest gap between the real and synthetic "
    "cumulative distributions (0 = the same distribution, 1 = no overlap). Below 0.05 is close; "
    "above 0.1 is flagged.",
    "value_errors": "Errors of the synthetic mean, median, standard deviation and quantiles "
    "(1, 5, 25, 50, 75, 95, 99 %), as (synthetic − real) divided by the real standard deviation: "
    "0 = identical, 0.1 = a tenth of the real spread, 1 = a whole standard deviation off.",
    "missing_rate_gap": "Synthetic minus real share of missing values in the column.",
    "mean_tvd": "Total variation distance between the real and synthetic tables' k-way "
    "marginals (share of rows in each combination of k columns), averaged over sets of k "
    "columns: 0 = identical proportions, 1 = nothing in common. Below 0.05 is close; above 0.2 "
    "is far.",
    "k_marginal_score": "SDNist-style score 1000·(1 − mean 3-way TVD): 1000 = every 3-way "
    "combination occurs in the same proportions; higher is better.",
    "distribution": "Share of real and synthetic rows in each category or bin of the column; "
    "its TVD is half the summed absolute difference of the two.",
    "pearson": "Pearson correlation of two ordered columns (−1 to 1), real and synthetic side by "
    "side, on the columns' values where the real values are available (else on their codes); "
    "the difference matrix shows synthetic − real. Small differences (below 0.1) mean the "
    "linear relation is kept.",
    "spearman": "Spearman rank correlation (−1 to 1): like Pearson on the values' ranks, so it "
    "catches any monotone relation.",
    "cramers_v": "Cramér's V of two columns' codes (0 = independent, 1 = one determines the "
    "other), for any column type; the difference is synthetic − real.",
    "worst_pairs": "The pairs of columns whose 2-way distributions differ most (highest TVD), "
    "with the share of synthetic rows whose pair of values never occurs in the real table.",
    "missing": "Share of rows with a missing value, real and synthetic, per nullable column: "
    "the two should be close.",
    "novel_combinations": "Share of synthetic rows whose whole combination of values (codes) "
    "occurs in no real row. Some is expected (a generator that only copies real rows would "
    "disclose them); a very high share with poor TVDs means implausible rows.",
    "exact_match": "Share of synthetic rows identical (on every column's code) to a real row of "
    "half A, against the share of held-out real rows (half B) identical to a row of A. A "
    "synthetic share far above the holdout share suggests memorised rows.",
    "dcr": "Distance to the closest record: for each row, the smallest share of columns on "
    "which it differs from any row of real half A (0 = an identical row exists). Synthetic "
    "distances much smaller than the holdout's suggest copying; similar or larger is expected.",
}
NOTES = (
    "Owner tier: computed from the REAL table. It can reveal real values and must only be "
    "shown to the data owner, never to analysts.",
    "The exact-match and distance checks are a utility-and-disclosure diagnostic, not a privacy "
    "guarantee: the guarantee is the release's differential privacy statement.",
)

_ORDERED_TYPES = (NumericColumn, DateColumn, DatetimeColumn, BooleanColumn)
_VALUE_TYPES = (NumericColumn, DateColumn, DatetimeColumn)


def _is_ordered(column: Column) -> bool:
    if isinstance(column, CategoricalColumn):
        return column.ordered
    return isinstance(column, _ORDERED_TYPES)


# --------------------------------------------------------------------------------------------
# Row keys: exact identity of rows (or of a few columns) across tables, without dense tables
# --------------------------------------------------------------------------------------------


def row_keys(tables: Sequence[Codes], sizes: Sequence[int]) -> list[IntArray]:
    """One int64 key per row of each table, equal exactly when the rows' codes are equal.

    A mixed-radix index when the columns' cells fit in int64, else ids from sorting the rows."""
    if math.prod(sizes) < 2**63:
        keys = []
        for table in tables:
            key = np.zeros(table.shape[0], dtype=np.int64)
            for j, size in enumerate(sizes):
                key *= size
                key += table[:, j].astype(np.int64)
            keys.append(key)
        return keys
    stacked = np.concatenate(tables)
    _, inverse = np.unique(stacked, axis=0, return_inverse=True)
    inverse = inverse.ravel().astype(np.int64)
    bounds = np.cumsum([0, *(t.shape[0] for t in tables)])
    return [inverse[bounds[i] : bounds[i + 1]] for i in range(len(tables))]


def share_found(queries: Codes, reference: Codes, sizes: Sequence[int]) -> float:
    """Share of ``queries`` rows identical to some row of ``reference``."""
    if queries.shape[0] == 0:
        return 0.0
    query_keys, reference_keys = row_keys([queries, reference], sizes)
    return float(np.isin(query_keys, reference_keys).mean())


def nearest_hamming(queries: Codes, reference: Codes) -> IntArray:
    """For each query row, the fewest columns on which it differs from a ``reference`` row.

    Chunked so at most :data:`DCR_CHUNK_CELLS` distances are held at once; cost
    O(queries · reference · columns)."""
    columns = queries.shape[1]
    dtype = np.uint16 if columns < 2**16 else np.uint32
    chunk = max(1, DCR_CHUNK_CELLS // max(reference.shape[0], 1))
    out = np.empty(queries.shape[0], dtype=np.int64)
    for start in range(0, queries.shape[0], chunk):
        block = queries[start : start + chunk]
        distance = np.zeros((block.shape[0], reference.shape[0]), dtype=dtype)
        for j in range(columns):
            distance += block[:, j, None] != reference[None, :, j]
        out[start : start + block.shape[0]] = distance.min(axis=1)
    return out


# --------------------------------------------------------------------------------------------
# Pairwise statistics
# --------------------------------------------------------------------------------------------


def cramers_v(x: Codes, y: Codes) -> float | None:
    """Cramér's V = √(χ² / (n·(min(r, c) − 1))) of two code vectors, over the r and c codes
    that occur; χ² = n·(Σ n_ij² / (n_i·n_j) − 1) on occupied cells only (no dense table).
    None when either vector is constant (V undefined)."""
    n = x.shape[0]
    if n == 0:
        return None
    row_counts = np.bincount(x)
    col_counts = np.bincount(y)
    r = int(np.count_nonzero(row_counts))
    c = int(np.count_nonzero(col_counts))
    if min(r, c) < 2:
        return None
    keys = x.astype(np.int64) * col_counts.size + y.astype(np.int64)
    cells, counts = np.unique(keys, return_counts=True)
    rows, cols = np.divmod(cells, col_counts.size)
    ratio = counts.astype(np.float64) ** 2 / (
        row_counts[rows].astype(np.float64) * col_counts[cols].astype(np.float64)
    )
    chi2 = n * max(float(ratio.sum()) - 1.0, 0.0)
    return min(math.sqrt(chi2 / (n * (min(r, c) - 1))), 1.0)


def pearson(x: FloatArray, y: FloatArray) -> float | None:
    """Pearson correlation on the rows where both are finite; None if undefined."""
    mask = np.isfinite(x) & np.isfinite(y)
    if int(mask.sum()) < MIN_CORRELATION_ROWS:
        return None
    a = x[mask] - x[mask].mean()
    b = y[mask] - y[mask].mean()
    scale = math.sqrt(float((a * a).sum()) * float((b * b).sum()))
    if scale == 0:
        return None
    return max(-1.0, min(1.0, float((a * b).sum()) / scale))


def spearman(x: FloatArray, y: FloatArray) -> float | None:
    """Spearman correlation: Pearson on average ranks, rows where both are finite."""
    mask = np.isfinite(x) & np.isfinite(y)
    if int(mask.sum()) < MIN_CORRELATION_ROWS:
        return None
    return pearson(rankdata(x[mask]).astype(np.float64), rankdata(y[mask]).astype(np.float64))


def _code_vector(column: Column, codes: Codes) -> FloatArray:
    values = codes.astype(np.float64)
    if column.null_code is not None:
        values[codes == column.null_code] = np.nan
    return values


def _symmetric(
    names: Sequence[str], values: dict[tuple[str, str], float | None]
) -> list[list[float | None]]:
    return [
        [1.0 if a == b else rounded(values.get((a, b), values.get((b, a)))) for b in names]
        for a in names
    ]


def _difference(
    real: list[list[float | None]], synthetic: list[list[float | None]]
) -> list[list[float | None]]:
    return [
        [None if r is None or s is None else rounded(s - r) for r, s in zip(rr, ss, strict=True)]
        for rr, ss in zip(real, synthetic, strict=True)
    ]


def _correlations(
    schema: TableSchema,
    real: Codes,
    synthetic: Codes,
    real_rows: IntArray,
    synthetic_rows: IntArray,
    value_vectors: Mapping[str, tuple[FloatArray, FloatArray]],
) -> dict[str, Any]:
    """Pearson/Spearman on ordered columns (on ``value_vectors``: the values at ``real_rows`` /
    ``synthetic_rows``, where given; else on codes) and Cramér's V on codes."""
    domain = schema.domain()
    names = matrix_columns(domain)
    ordered = [n for n in names if _is_ordered(schema.column(n))]
    source: dict[str, str] = {}
    vectors: dict[str, tuple[FloatArray, FloatArray]] = {}
    for name in ordered:
        column = schema.column(name)
        j = domain.index(name)
        if isinstance(column, _VALUE_TYPES) and name in value_vectors:
            vectors[name] = value_vectors[name]
            source[name] = "values"
        else:
            vectors[name] = (
                _code_vector(column, real[real_rows, j]),
                _code_vector(column, synthetic[synthetic_rows, j]),
            )
            source[name] = "codes"
    result: dict[str, Any] = {
        "columns": list(names),
        "ordered_columns": ordered,
        "source": source,
        "rows_compared": {"real": int(real_rows.size), "synthetic": int(synthetic_rows.size)},
        "caps": {"columns": cap_note(len(domain), len(names), "columns")},
    }
    for label, function in (("pearson", pearson), ("spearman", spearman)):
        tables = []
        for side in (0, 1):
            values = {
                (a, b): function(vectors[a][side], vectors[b][side])
                for a, b in itertools.combinations(ordered, 2)
            }
            tables.append(_symmetric(ordered, values))
        result[label] = {
            "real": tables[0],
            "synthetic": tables[1],
            "difference": _difference(tables[0], tables[1]),
        }
    tables = []
    for codes, rows in ((real, real_rows), (synthetic, synthetic_rows)):
        values = {
            (a, b): cramers_v(codes[rows, domain.index(a)], codes[rows, domain.index(b)])
            for a, b in itertools.combinations(names, 2)
        }
        tables.append(_symmetric(names, values))
    result["cramers_v"] = {
        "real": tables[0],
        "synthetic": tables[1],
        "difference": _difference(tables[0], tables[1]),
    }
    return result


# --------------------------------------------------------------------------------------------
# Sections
# --------------------------------------------------------------------------------------------


def _marginals(
    schema: TableSchema, real: Dataset, synthetic: Dataset, rng: np.random.Generator
) -> dict[str, Any]:
    domain = schema.domain()
    scores = mean_tvd(
        real.codes, synthetic.codes, domain, max_way=3, max_marginals=MAX_SUBSETS_PER_K, rng=rng
    )
    top = max(scores)
    return {
        "mean_tvd": {str(k): rounded(v) for k, v in scores.items()},
        "k_marginal_score": rounded(1000.0 * (1.0 - scores[top])),
        "score_k": top,
        "subsets": {
            str(k): cap_note(
                math.comb(len(domain), k),
                min(math.comb(len(domain), k), MAX_SUBSETS_PER_K),
                "column sets",
            )
            for k in scores
        },
    }


def _distributions(schema: TableSchema, real: Dataset, synthetic: Dataset) -> list[dict[str, Any]]:
    labels = column_labels(schema)
    out = []
    for attr in schema.names[:MAX_DISTRIBUTION_COLUMNS]:
        p = shares(real, attr)
        q = shares(synthetic, attr)
        codes, rest = shown_codes(np.maximum(p, q))
        out.append(
            {
                "column": attr,
                "labels": [labels[attr][c] for c in codes] + ([REST_LABEL] if rest else []),
                "real": rounded_list(fold(p, codes, rest)),
                "synthetic": rounded_list(fold(q, codes, rest)),
                "tvd": rounded(0.5 * float(np.abs(p - q).sum())),
                "entries": cap_note(p.size, len(codes) + int(rest), "categories or bins"),
            }
        )
    return out


def _worst_pairs(
    schema: TableSchema, real: Dataset, synthetic: Dataset, rng: np.random.Generator
) -> dict[str, Any]:
    domain = schema.domain()
    total = math.comb(len(domain), 2)
    if total == 0:
        return {"pairs": [], "compared": cap_note(0, 0, "pairs")}
    if total <= MAX_TVD_PAIRS:
        pairs = list(itertools.combinations(domain.attributes, 2))
    else:
        chosen = np.sort(rng.choice(total, size=MAX_TVD_PAIRS, replace=False))
        everything = itertools.combinations(domain.attributes, 2)
        wanted = set(chosen.tolist())
        pairs = [pair for i, pair in enumerate(everything) if i in wanted]
    tvds = []
    for pair in pairs:
        # Only the pair's two columns: marginal_tvd validates what it is given, so a 2-column
        # slice keeps each call O(rows), not O(rows × columns).
        idx = [domain.index(a) for a in pair]
        sub = domain.project(pair)
        tvds.append((marginal_tvd(real.codes[:, idx], synthetic.codes[:, idx], sub, pair), pair))
    tvds.sort(key=lambda item: -item[0])
    worst = []
    for tvd, pair in tvds[:WORST_PAIRS]:
        idx = [domain.index(a) for a in pair]
        sizes = [domain.size(a) for a in pair]
        novel = 1.0 - share_found(synthetic.codes[:, idx], real.codes[:, idx], sizes)
        worst.append({"columns": list(pair), "tvd": rounded(tvd), "novel_share": rounded(novel)})
    return {"pairs": worst, "compared": cap_note(total, len(pairs), "pairs")}


def _missing(schema: TableSchema, real: Dataset, synthetic: Dataset) -> list[dict[str, Any]]:
    out = []
    for column in schema.columns:
        if column.null_code is None:
            continue
        out.append(
            {
                "column": column.name,
                "real": rounded(float((real.column(column.name) == column.null_code).mean())),
                "synthetic": rounded(
                    float((synthetic.column(column.name) == column.null_code).mean())
                ),
            }
        )
    return out


def _dcr_summary(distances: FloatArray, edges: FloatArray) -> dict[str, Any]:
    counts, _ = np.histogram(distances, bins=edges)
    return {
        "median": rounded(float(np.median(distances))),
        "p5": rounded(float(np.percentile(distances, 5))),
        "zero_share": rounded(float((distances == 0).mean())),
        "histogram": rounded_list(counts / max(distances.size, 1)),
    }


def _disclosure(
    schema: TableSchema,
    real: Codes,
    synthetic: Codes,
    sample: IntArray,
    rng: np.random.Generator,
) -> dict[str, Any]:
    sizes = schema.domain().sizes
    columns = len(sizes)
    half = sample.size // 2
    if half == 0:
        return {"available": False, "reason": "too few real rows to split into two halves"}
    holdout = real[sample[:half]]
    reference = real[sample[half:]]
    queries = synthetic[
        rng.choice(synthetic.shape[0], size=min(half, synthetic.shape[0]), replace=False)
    ]
    dcr_queries = min(MAX_DCR_QUERIES, half, queries.shape[0])
    synthetic_dcr = nearest_hamming(queries[:dcr_queries], reference) / columns
    holdout_dcr = nearest_hamming(holdout[:dcr_queries], reference) / columns
    if columns + 1 <= 25:
        edges = (np.arange(columns + 2) - 0.5) / columns
    else:
        edges = np.linspace(0.0, 1.0, 21)
    return {
        "available": True,
        "rows": {
            "reference_a": int(reference.shape[0]),
            "holdout_b": int(holdout.shape[0]),
            "synthetic_queries": int(queries.shape[0]),
            "dcr_queries": int(dcr_queries),
        },
        "exact_match": {
            "synthetic_to_real": rounded(share_found(synthetic, real, sizes)),
            "synthetic_to_a": rounded(share_found(queries, reference, sizes)),
            "holdout_b_to_a": rounded(share_found(holdout, reference, sizes)),
        },
        "dcr": {
            "bin_edges": rounded_list(np.clip(edges, 0.0, 1.0)),
            "synthetic_to_a": _dcr_summary(synthetic_dcr, edges),
            "holdout_b_to_a": _dcr_summary(holdout_dcr, edges),
        },
    }


def _counted(data: Dataset, cap: int, rng: np.random.Generator) -> Dataset:
    """``data`` itself up to ``cap`` rows, else a uniform sample of ``cap`` of its rows (without
    replacement, in table order)."""
    if data.n_rows <= cap:
        return data
    rows = np.sort(rng.choice(data.n_rows, size=cap, replace=False))
    picked = data.codes[rows]
    picked.flags.writeable = False
    return Dataset(data.domain, picked)


def _source(values: pa.Table | ValueSource | None) -> ValueSource | None:
    if values is None or isinstance(values, ValueSource):
        return values
    return ValueSource.of_table(values)


def _values(
    schema: TableSchema,
    real: ValueSource | None,
    synthetic: ValueSource | None,
    real_data: Dataset,
    synthetic_data: Dataset,
    orders: tuple[IntArray, IntArray],
    correlation_rows: int,
    max_value_rows: int,
    reason: str | None,
) -> ValueComparison:
    if value_columns(schema) and (real is None or synthetic is None):
        return unavailable(reason) if reason else unavailable()
    if real is None or synthetic is None:  # nothing to compare on values anyway
        real = synthetic = ValueSource(lambda: (), 0)
    try:
        return compare_values(
            schema,
            real,
            synthetic,
            real_rows=real_data.n_rows,
            synthetic_rows=synthetic_data.n_rows,
            real_order=orders[0],
            synthetic_order=orders[1],
            correlation_rows=correlation_rows,
            max_value_rows=max_value_rows,
        )
    except ValuesMismatch as error:
        return unavailable(
            f"The values given do not line up with the tables ({error}), so numeric and date "
            "columns are compared on their bins only."
        )


def build_owner_report(
    schema: TableSchema,
    real: npt.NDArray[np.integer[Any]],
    synthetic: npt.NDArray[np.integer[Any]],
    *,
    real_values: pa.Table | ValueSource | None = None,
    synthetic_values: pa.Table | ValueSource | None = None,
    values_unavailable: str | None = None,
    rng: np.random.Generator,
    max_rows_compared: int = 20_000,
    max_rows_counted: int = MAX_ROWS_COUNTED,
    max_value_rows: int = MAX_VALUE_ROWS,
) -> dict[str, Any]:
    """The owner-tier report (JSON-able): the synthetic table against the real one.

    ``real`` and ``synthetic`` are code tables of ``schema``'s domain. ``real_values`` (the real
    table's raw values, :mod:`engine.tables.raw_values`) and ``synthetic_values`` (the synthetic
    table's decoded values: the published rows), row-aligned with the codes, as Arrow tables or
    streamed :class:`~engine.reports.values.ValueSource`, give the value metrics, the verdict and
    Pearson/Spearman on values (engine/reports/values.py). Without both, numeric and date
    columns are compared on their bins and the verdict says so (``values_unavailable``: why).

    ``max_rows_compared`` caps the real rows (and synthetic rows) used for correlations and the
    holdout split; ``max_rows_counted`` the rows of each table counted for marginals,
    distributions, missing rates and novel combinations (:data:`MAX_ROWS_COUNTED`);
    ``max_value_rows`` the rows of each table sampled for KS, moments and quantiles. Reads the
    real table: owners only (module docstring).
    """
    for cap, name in (
        (max_rows_compared, "max_rows_compared"),
        (max_rows_counted, "max_rows_counted"),
        (max_value_rows, "max_value_rows"),
    ):
        if isinstance(cap, bool) or cap < 2:
            raise ValueError(f"{name} must be an integer of at least 2")
    real_data = check_codes(schema, real, "real")
    synthetic_data = check_codes(schema, synthetic, "synthetic")
    real_source, synthetic_source = _source(real_values), _source(synthetic_values)
    for source, data, what in (
        (real_source, real_data, "real"),
        (synthetic_source, synthetic_data, "synthetic"),
    ):
        if source is not None and source.rows is not None and source.rows != data.n_rows:
            raise ValueError(f"{what}_values must have one row per row of the {what} codes")
    real_codes = real_data.codes
    synthetic_codes = synthetic_data.codes
    real_order = rng.permutation(real_data.n_rows)
    synthetic_order = rng.permutation(synthetic_data.n_rows)
    sample = real_order[:max_rows_compared]
    synthetic_sample = synthetic_order[:max_rows_compared]
    real_counted = _counted(real_data, max_rows_counted, rng)
    synthetic_counted = _counted(synthetic_data, max_rows_counted, rng)
    marginals = _marginals(schema, real_counted, synthetic_counted, rng)
    worst = _worst_pairs(schema, real_counted, synthetic_counted, rng)
    novel = 1.0 - share_found(synthetic_counted.codes, real_counted.codes, schema.domain().sizes)
    values = _values(
        schema,
        real_source,
        synthetic_source,
        real_data,
        synthetic_data,
        (real_order, synthetic_order),
        max_rows_compared,
        max_value_rows,
        values_unavailable,
    )
    del real_order, synthetic_order
    return {
        "tier": "owner",
        "verdict": verdict(values.section, marginals["k_marginal_score"]),
        "notes": list(NOTES),
        "explanations": dict(EXPLANATIONS),
        "rows": {
            "real": real_data.n_rows,
            "synthetic": synthetic_data.n_rows,
            "real_counted": real_counted.n_rows,
            "synthetic_counted": synthetic_counted.n_rows,
        },
        "columns": [
            {"name": column.name, "type": column.type, "size": column.size}
            for column in schema.columns
        ],
        "values": values.section,
        "marginals": marginals,
        "distributions": _distributions(schema, real_counted, synthetic_counted),
        "correlations": _correlations(
            schema,
            real_codes,
            synthetic_codes,
            np.sort(sample),
            np.sort(synthetic_sample),
            values.vectors,
        ),
        "worst_pairs": worst,
        "missing": _missing(schema, real_counted, synthetic_counted),
        "novel_combinations": {"share": rounded(novel)},
        "disclosure": _disclosure(schema, real_codes, synthetic_codes, sample, rng),
        "caps": {
            "max_rows_compared": max_rows_compared,
            "max_rows_counted": max_rows_counted,
            "subsets_per_k": MAX_SUBSETS_PER_K,
            "tvd_pairs": MAX_TVD_PAIRS,
            "distribution_columns": MAX_DISTRIBUTION_COLUMNS,
            "codes_per_distribution": MAX_CODES_SHOWN,
            "matrix_columns": MAX_MATRIX_COLUMNS,
            "dcr_queries": MAX_DCR_QUERIES,
            "max_value_rows": max_value_rows,
            "values": values.section.get("caps"),
        },
    }
