"""One counting interface, three engines (issue 29 §2, first piece).

numpy (:class:`Dataset`), DuckDB and Spark give identical tables on the stored Parquet layout,
the methods that read only counts give byte-identical releases through each, the others refuse
another engine before reading anything, and the default (numpy) path is pinned to the digests
of main's tree before this change. Deterministic: no statistical test, no timing.
"""

from __future__ import annotations

import itertools
import random
import shutil
from collections.abc import Iterator, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engine.counting import CountingEngine, IntArray, is_counting_engine
from engine.counting.duckdb import DuckDBCounts
from engine.counting.parquet import write_codes
from engine.domain import Dataset, Domain
from engine.marginals import count_marginal
from engine.mechanisms import MECHANISMS
from engine.mechanisms.base import DomainRefused, EngineRefused
from tests.engine.counting.digests import release_digest, seeded_dataset, seeded_run

# Digests of a seeded run of every method on tests.engine.counting.digests' table, computed on
# main's tree before the counting engines existed (`python -m tests.engine.counting.digests`).
MAIN_DIGESTS = {
    "independent": "c8296e8d824e5c7e33c37d17a84aabb77722f33da1422d7b6da15ce6080ae70b",
    "mst": "5a7709be38c9574d0fe6638a8e03c414618886aaf7b4623f906456474c66d742",
    "aim": "1c59fb782e86e59b002e366d32a5b4dfe878cacfaa09c41e833d8d50df889bca",
    "privsyn": "49593d19860e2fb5e72a8915b7f296c6135c72c3facf9f3961afcb403cb4b723",
    "ppsyn": "321faed4092c52f5aa4c557b08082522e9a2ec5c03689ccae0221d888d246766",
    "privmrf": "9a9be54e21427c8d918e33166f7902da9732a55a960702c571fdd1b85811762f",
    "cipher": "15670e43f09208949696b23aa81e30071d5b944d9605c91b44de7eb6c62aeaf5",
    "dpcopula": "25133949a8013ef66ed2cd70e513da2457e5ab52b06b9e9448c8f9fe1b160c77",
}
COUNTS_ONLY = tuple(MAIN_DIGESTS)  # every method runs on every engine (issue 29)


def _spark_skip_reason() -> str | None:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return "pyspark is not installed: `pip install -e '.[spark]'` (or '.[test]')"
    if shutil.which("java") is None and not _java_home():
        return "no Java runtime: install a JDK 17+ (apt-get install openjdk-17-jre-headless)"
    return None


def _java_home() -> bool:
    import os

    return bool(os.environ.get("JAVA_HOME"))


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local[2] SparkSession for the whole test session (starting one takes seconds)."""
    reason = _spark_skip_reason()
    if reason is not None:
        pytest.skip(f"Spark tests skipped: {reason}")
    from engine.counting.spark import spark_session

    session = spark_session("local[2]")
    yield session
    session.stop()


def _engine(kind: str, data: Dataset, path: Path, request: pytest.FixtureRequest) -> CountingEngine:
    """``data`` as the engine ``kind`` (Spark skips, saying how to enable it, without Java)."""
    if kind == "numpy":
        return data
    write_codes(data, path, row_group_size=97)
    if kind == "duckdb":
        return DuckDBCounts(path, data.domain, memory_limit="256MB", threads=2)
    from engine.counting.spark import SparkCounts

    return SparkCounts(path, data.domain, session=request.getfixturevalue("spark"))


def _sparse_dataset(domain: Domain, rows: int, seed: int) -> Dataset:
    """Codes drawn from few values per column, so most cells of the wider tables are empty."""
    rng = np.random.default_rng(seed)
    columns = [
        rng.choice(rng.choice(size, size=min(size, 3), replace=False), size=rows)
        for size in domain.sizes
    ]
    codes = np.column_stack(columns) if rows else np.empty((0, len(domain)), dtype=np.int64)
    return Dataset(domain, codes.astype(np.int64))


def _attribute_sets(domain: Domain) -> list[tuple[str, ...]]:
    attrs = domain.attributes
    sets: list[tuple[str, ...]] = [()]
    sets += [(a,) for a in attrs]
    sets += list(itertools.permutations(attrs, 2))[:8]
    sets += [tuple(attrs[:3]), tuple(reversed(attrs[:3])), tuple(attrs)]
    return sets


# Names DuckDB and Spark must take literally (a dot, a quote, a space).
DOMAIN = Domain.from_mapping({"a.b": 3, 'q"uote': 1, "age group": 7, "x": 300, "y": 2})


@pytest.mark.parametrize("kind", ["duckdb", "spark"])
@pytest.mark.parametrize(("rows", "seed"), [(0, 0), (1, 1), (257, 2), (3000, 3)])
def test_engines_count_what_numpy_counts(
    tmp_path: Path, request: pytest.FixtureRequest, kind: str, rows: int, seed: int
) -> None:
    data = _sparse_dataset(DOMAIN, rows, seed)
    sets = _attribute_sets(DOMAIN)
    expected = data.counts(sets)
    engine = _engine(kind, data, tmp_path / "codes.parquet", request)
    assert engine.n_rows == rows
    got = engine.counts(sets)
    for attrs, want, table in zip(sets, expected, got, strict=True):
        assert table.dtype == np.int64
        assert table.shape == want.shape == (DOMAIN.project(attrs).sizes if attrs else ())
        np.testing.assert_array_equal(table, want, err_msg=f"{kind} {attrs}")
        assert int(table.sum()) == rows
    # The sparse tables do have empty cells (so zero filling is exercised).
    assert (expected[-1] == 0).sum() > 0


# Public code maps of DOMAIN (original code -> re-coded code), None where nothing is merged.
RECODED = Domain(DOMAIN.attributes, (2, 1, 4, 6, 2))
MAPS = (
    np.array([0, 1, 1]),
    None,
    np.array([3, 0, 1, 2, 2, 2, 3]),
    np.minimum(np.arange(300), 5),
    None,
)


@pytest.mark.parametrize("kind", ["duckdb", "spark", "spark_joined", "generic"])
def test_recoded_engines_count_what_recoded_codes_count(
    tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """Counts over public code maps (DuckDB and Spark: in the query, Spark's long maps by a
    join; any other engine: its original tables summed) equal the tables of the codes re-coded
    in memory, cell for cell, one table per query and batched."""
    from engine.counting import RecodedCounts, recoded_engine

    if kind == "spark_joined":
        import engine.counting.spark as spark_counts

        monkeypatch.setattr(spark_counts, "LITERAL_MAP_VALUES", 2)  # longer maps are joined
        kind = "spark"

    rng = np.random.default_rng(8)
    data = Dataset(DOMAIN, np.column_stack([rng.integers(0, n, 2000) for n in DOMAIN.sizes]))
    columns = [data.codes[:, j] if m is None else m[data.codes[:, j]] for j, m in enumerate(MAPS)]
    expected = Dataset(RECODED, np.column_stack(columns)).counts(_attribute_sets(RECODED))
    base = data if kind == "generic" else _engine(kind, data, tmp_path / "c.parquet", request)
    recoded = recoded_engine(base, RECODED, MAPS)
    assert isinstance(recoded, RecodedCounts) == (kind == "generic")
    assert recoded.domain == RECODED and recoded.n_rows == 2000
    got = recoded.counts(_attribute_sets(RECODED))
    for attrs, want, table in zip(_attribute_sets(RECODED), expected, got, strict=True):
        assert table.dtype == np.int64 and table.shape == want.shape
        np.testing.assert_array_equal(table, want, err_msg=f"{kind} {attrs}")
    if kind != "generic":
        recoded.batched = True  # type: ignore[attr-defined]
        got = recoded.counts(_attribute_sets(RECODED))
        for attrs, want, table in zip(_attribute_sets(RECODED), expected, got, strict=True):
            np.testing.assert_array_equal(table, want, err_msg=f"{kind} batched {attrs}")


@pytest.mark.parametrize("kind", ["duckdb", "spark"])
def test_recoded_counts_take_the_largest_code_of_every_column_type(
    tmp_path: Path, request: pytest.FixtureRequest, kind: str
) -> None:
    """A column of 256 values is stored as uint8: its code 255 must be mapped, not overflow
    (DuckDB's ``code + 1`` was computed in UINT8: a job failed iff a row held the last value);
    a uint64 column is mapped too (DuckDB had no list index of UBIGINT)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from engine.counting import recoded_engine

    domain = Domain.from_mapping({"u8": 256, "u16": 65536, "u64": 3})
    columns = {"u8": [255, 0, 255], "u16": [65535, 1, 0], "u64": [2, 2, 0]}
    types = {"u8": pa.uint8(), "u16": pa.uint16(), "u64": pa.uint64()}
    pq.write_table(
        pa.table({k: pa.array(v, types[k]) for k, v in columns.items()}), tmp_path / "c.parquet"
    )
    if kind == "duckdb":
        engine: CountingEngine = DuckDBCounts(tmp_path / "c.parquet", domain)
    else:
        from engine.counting.spark import SparkCounts

        engine = SparkCounts(
            tmp_path / "c.parquet", domain, session=request.getfixturevalue("spark")
        )
    maps = (np.minimum(np.arange(256), 1), np.minimum(np.arange(65536), 1), np.array([0, 1, 1]))
    recoded = recoded_engine(engine, Domain(domain.attributes, (2, 2, 2)), maps)
    tables = recoded.counts([("u8",), ("u16",), ("u64",), ("u8", "u16")])
    assert [t.tolist() for t in tables[:3]] == [[1, 2], [1, 2], [1, 2]]
    assert tables[3].tolist() == [[0, 1], [1, 1]]


def test_duckdb_drops_the_tables_of_code_maps_with_the_recoded_counts(tmp_path: Path) -> None:
    """One connection may serve many runs: a run's map tables go once its counts are released."""
    import gc

    from engine.counting import recoded_engine

    write_codes(_sparse_dataset(DOMAIN, 20, 3), tmp_path / "c.parquet")
    engine = DuckDBCounts(tmp_path / "c.parquet", DOMAIN)

    def temporary() -> int:
        row = engine._connection.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE temporary"
        ).fetchone()
        assert row is not None
        return int(row[0])

    for _ in range(3):  # the previous run's tables dropped when the next run re-codes
        recoded = recoded_engine(engine, RECODED, MAPS)
        assert temporary() == 3 and int(recoded.counts([("x",)])[0].sum()) == 20
        del recoded
        gc.collect()
    engine.close()


def test_code_maps_are_checked() -> None:
    from engine.counting import check_code_maps

    with pytest.raises(ValueError, match="into the new domain"):
        check_code_maps(DOMAIN, RECODED, (np.array([0, 1, 2]), *MAPS[1:]))
    with pytest.raises(ValueError, match="keeps its size"):
        check_code_maps(DOMAIN, RECODED, (None, *MAPS[1:]))
    with pytest.raises(ValueError, match="one code map per attribute"):
        check_code_maps(DOMAIN, RECODED, MAPS[:2])


def test_batches_bound_the_cells_and_columns_of_one_query(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import engine.counting as counting

    monkeypatch.setattr(counting, "BATCH_CELLS", 700)
    sets = [("x", "y"), ("a.b", "x"), ("age group", "y"), ("x",), ("a.b", "age group")]
    cut = counting.batches(DOMAIN, sets)
    assert [s for batch in cut for s in batch] == sets  # every set once, in order
    assert cut == [[("x", "y")], [("a.b", "x")], [("age group", "y"), ("x",), ("a.b", "age group")]]
    monkeypatch.setattr(counting, "BATCH_COLUMNS", 2)
    assert counting.batches(DOMAIN, [("x", "y"), ("a.b",)]) == [[("x", "y")], [("a.b",)]]


@pytest.mark.parametrize("kind", ["duckdb", "spark"])
def test_batched_counts_equal_one_query_per_table(
    tmp_path: Path, request: pytest.FixtureRequest, kind: str
) -> None:
    """GROUPING SETS in one scan give the same tables as one GROUP BY per table."""
    data = _sparse_dataset(DOMAIN, 500, 9)
    engine = _engine(kind, data, tmp_path / "c.parquet", request)
    sets = [*_attribute_sets(DOMAIN)[1:], ("x", "y")]  # a repeated set too
    engine.batched = True  # type: ignore[attr-defined]
    scans: list[int] = []
    one_scan = engine._grouping_sets  # type: ignore[attr-defined]

    def spy(batch: list[tuple[str, ...]]) -> dict[tuple[str, ...], IntArray]:
        scans.append(len(batch))
        result: dict[tuple[str, ...], IntArray] = one_scan(batch)
        return result

    engine._grouping_sets = spy  # type: ignore[attr-defined]
    batched = engine.counts(sets)
    assert scans and sum(scans) >= len(sets) - 2  # the small tables shared scans
    engine.batched = False  # type: ignore[attr-defined]
    single = engine.counts(sets)
    for want, got, plain in zip(data.counts(sets), batched, single, strict=True):
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(plain, want)


def test_duckdb_reads_a_directory_of_files_and_counts_the_union(tmp_path: Path) -> None:
    data = _sparse_dataset(DOMAIN, 1000, 4)
    folder = tmp_path / "codes"
    folder.mkdir()
    write_codes(Dataset(DOMAIN, data.codes[:400]), folder / "part-0.parquet")
    write_codes(Dataset(DOMAIN, data.codes[400:]), folder / "part-1.parquet")
    engine = DuckDBCounts(folder, DOMAIN)
    sets = _attribute_sets(DOMAIN)
    for want, got in zip(data.counts(sets), engine.counts(sets), strict=True):
        np.testing.assert_array_equal(got, want)


def test_duckdb_applies_its_memory_limit_and_threads(tmp_path: Path) -> None:
    write_codes(_sparse_dataset(DOMAIN, 10, 6), tmp_path / "c.parquet")
    engine = DuckDBCounts(tmp_path / "c.parquet", DOMAIN, memory_limit="300MB", threads=1)
    connection = engine._connection  # the engine's own connection
    threads = connection.execute("SELECT current_setting('threads')").fetchone()
    limit = connection.execute("SELECT current_setting('memory_limit')").fetchone()
    assert threads is not None and int(threads[0]) == 1
    assert limit is not None and limit[0] == "286.1 MiB"  # 300 MB, in binary units
    with pytest.raises(ValueError, match="threads"):
        DuckDBCounts(tmp_path / "c.parquet", DOMAIN, threads=0)


def test_duckdb_refuses_codes_outside_the_domain_naming_only_the_column(tmp_path: Path) -> None:
    wide = Domain.from_mapping({"secret": 10})
    write_codes(Dataset(wide, np.array([[0], [9]])), tmp_path / "c.parquet")
    engine = DuckDBCounts(tmp_path / "c.parquet", Domain.from_mapping({"secret": 5}))
    with pytest.raises(ValueError, match=r"column 'secret' has codes outside 0\.\.4") as info:
        engine.counts([("secret",)])
    assert "9" not in str(info.value)


def test_unknown_attributes_are_refused_like_numpy(tmp_path: Path) -> None:
    data = _sparse_dataset(DOMAIN, 10, 5)
    write_codes(data, tmp_path / "c.parquet")
    engine = DuckDBCounts(tmp_path / "c.parquet", DOMAIN)
    with pytest.raises(KeyError):
        data.counts([("nope",)])
    with pytest.raises(KeyError):
        engine.counts([("nope",)])
    with pytest.raises(ValueError):
        engine.counts([("x", "x")])


class _WrongShape:
    """A counting engine that answers a table of the wrong shape."""

    domain = DOMAIN
    n_rows = 3

    def counts(self, attribute_sets: Sequence[Sequence[str]]) -> list[IntArray]:
        return [np.zeros(2, dtype=np.int64) for _ in attribute_sets]


def test_count_marginal_checks_what_an_engine_returns() -> None:
    assert is_counting_engine(_WrongShape())
    with pytest.raises(RuntimeError, match="wrong type or shape"):
        count_marginal(_WrongShape(), ["x"])


@pytest.mark.parametrize("name", sorted(MAIN_DIGESTS))
def test_the_default_numpy_path_is_bit_for_bit_main(name: str) -> None:
    """A golden test: it hashes float bits, so a numpy/scipy/BLAS upgrade or another CPU can
    change a graphical method's digest with nothing wrong. A deliberate change to a method's
    output, or such drift once checked, is recorded by re-running
    ``python -m tests.engine.counting.digests`` and updating MAIN_DIGESTS."""
    assert release_digest(seeded_run(name, seeded_dataset())) == MAIN_DIGESTS[name]


def test_the_digest_sees_the_noise() -> None:
    """A different release gives a different digest (so the pinned digests can fail)."""
    data = seeded_dataset()
    other = Dataset(data.domain, np.ascontiguousarray(data.codes[1:]))
    assert release_digest(seeded_run("independent", other)) != MAIN_DIGESTS["independent"]


@pytest.mark.parametrize(
    ("name", "kind"),
    [(name, kind) for name in COUNTS_ONLY for kind in ("numpy", "duckdb")]
    # Spark once per method is in the merged-values test below; here the first two only.
    + [("independent", "spark"), ("cipher", "spark")],
)
def test_counting_methods_release_the_same_bytes_through_every_engine(
    tmp_path: Path, request: pytest.FixtureRequest, name: str, kind: str
) -> None:
    """Same seeded noise_source and rng: the same codes, measurements and charges (the
    ledger's entry is the ρ the result states) whichever engine counted."""
    data = seeded_dataset()
    engine = _engine(kind, data, tmp_path / "codes.parquet", request)
    # Against the numpy run of this same process (not the pinned digest), so that float drift
    # from a library upgrade shows in the pinned test alone, not as an engine fault.
    assert release_digest(seeded_run(name, engine)) == release_digest(seeded_run(name, data))


# A table where compression merges: "rare" and "tail" put most rows on a few values and a handful
# on many others (below 3σ of the one-way noise), so every graphical method counts over
# re-coded codes (pushed into the DuckDB and Spark queries).
RARE_DOMAIN = Domain.from_mapping({"sex": 2, "rare": 12, "age": 6, "tail": 30, "flag": 1})
RARE_ROWS = 3000


def rare_dataset(seed: int = 5) -> Dataset:
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 2, RARE_ROWS)
    sex = np.where(rng.random(RARE_ROWS) < 0.7, base, 1 - base)
    rare = np.where(rng.random(RARE_ROWS) < 0.995, base * 2, rng.integers(0, 12, RARE_ROWS))
    age = np.where(rng.random(RARE_ROWS) < 0.5, base * 5, rng.integers(0, 6, RARE_ROWS))
    tail = np.minimum(rng.geometric(0.35, RARE_ROWS) - 1, 29)
    flag = np.zeros(RARE_ROWS, dtype=np.int64)
    codes = np.column_stack([sex, rare, age, tail, flag]).astype(np.int64)
    return Dataset(RARE_DOMAIN, codes)


def _rare_run(name: str, data: Dataset | CountingEngine) -> Any:
    from engine.mechanisms.base import SynthesisResult

    mechanism = MECHANISMS[name]
    result: SynthesisResult = mechanism.run(
        data,
        Fraction(1, 4),
        mechanism.validate_params({}),
        rng=np.random.default_rng(3),
        rows=200,
        noise_source=random.Random(17),
    )
    return result


def _released(result: Any) -> dict[str, Any]:
    """What reaches the release and the ledger, as plain comparable values."""
    return {
        "codes": (result.codes.dtype.str, result.codes.shape, result.codes.tobytes()),
        "measurements": [
            (m.attributes, m.noisy_counts.tobytes(), m.noisy_counts.shape, m.sigma2, m.rho)
            for m in result.measurements
        ],
        "selections": [repr(s) for s in result.selections],
        "releases": [repr(r) for r in result.releases],
        "rho_used": result.rho_used,
        "axis_maps": [
            [None if a is None else a.tolist() for a in axes] for axes in result.axis_maps or ()
        ],
    }


_NUMPY_RARE: dict[str, dict[str, Any]] = {}


@pytest.mark.parametrize("kind", ["duckdb", "spark"])
@pytest.mark.parametrize("name", COUNTS_ONLY)
def test_every_method_releases_the_same_bytes_on_merged_values(
    tmp_path: Path, request: pytest.FixtureRequest, name: str, kind: str
) -> None:
    """Same seed, same noise source: identical codes, measurements (attributes, noisy counts,
    σ², ρ), selections, releases and ρ used on numpy, DuckDB and Spark, on a table whose rare
    values compression merges (the re-coded counts inside the engines' queries)."""
    data = rare_dataset()
    if name not in _NUMPY_RARE:
        _NUMPY_RARE[name] = _released(_rare_run(name, data))
    want = _NUMPY_RARE[name]
    if name in ("mst", "aim", "privsyn", "ppsyn", "privmrf"):
        # Compression did merge values (a column has an axis map), so re-coding is exercised.
        assert any(a is not None for axes in want["axis_maps"] for a in axes)
    if name == "dpcopula":
        # The Kendall step ran, so its subsample was read by position.
        assert any("Kendall" in r for r in want["releases"])
    engine = _engine(kind, data, tmp_path / "codes.parquet", request)
    got = _released(_rare_run(name, engine))
    assert got == want


def test_runs_on_counts_is_exactly_the_counting_methods() -> None:
    assert {n for n, m in MECHANISMS.items() if m.runs_on_counts} == set(COUNTS_ONLY)


class _Untouchable:
    """A counting engine that fails the test if anything is read from it."""

    domain = seeded_dataset().domain

    @property
    def n_rows(self) -> int:
        raise AssertionError("n_rows was read")

    def counts(self, attribute_sets: Sequence[Sequence[str]]) -> list[IntArray]:
        raise AssertionError("counts were read")


def test_dpcopula_refuses_an_engine_that_cannot_read_rows_before_reading() -> None:
    """DPCopula's Kendall subsample reads rows by position: an engine without ``codes_at`` is
    refused from the method and the engine alone, before anything is counted."""
    with pytest.raises(EngineRefused, match="reads a subsample of rows by position") as info:
        seeded_run("dpcopula", _Untouchable())
    assert isinstance(info.value, DomainRefused)  # the service's public refusal


def test_dpcopula_mle_refuses_another_engine_before_reading() -> None:
    """DPCopula-MLE reads every row: refused on another engine (no count asked), run on a
    Dataset."""
    data = seeded_dataset()
    engine = _Recording(data)
    mechanism = MECHANISMS["dpcopula"]
    params = mechanism.validate_params({"correlation": "mle"})
    with pytest.raises(EngineRefused, match="correlation 'mle' reads every row"):
        mechanism.run(engine, RHO_FOR_TESTS, params, rng=np.random.default_rng(0))
    assert engine.requests == []
    result = mechanism.run(data, RHO_FOR_TESTS, params, rng=np.random.default_rng(0), rows=10)
    assert result.rho_used == RHO_FOR_TESTS


RHO_FOR_TESTS = Fraction(1, 2)


@pytest.mark.parametrize("kind", ["numpy", "duckdb", "spark"])
def test_rows_by_position_are_the_datasets_rows(
    tmp_path: Path, request: pytest.FixtureRequest, kind: str
) -> None:
    """``codes_at``: the rows at given positions (in the order asked), and every row, as the
    Dataset holds them, on a file written in several row groups."""
    from engine.counting import codes_at

    data = _sparse_dataset(DOMAIN, 1000, 12)
    engine = _engine(kind, data, tmp_path / "c.parquet", request)
    attrs = ["x", "a.b", "age group"]
    index = [DOMAIN.index(a) for a in attrs]
    positions = np.array([999, 0, 500, 96, 97, 3], dtype=np.intp)
    got = codes_at(engine, attrs, positions)
    assert got is not None and got.dtype == np.int64
    np.testing.assert_array_equal(got, data.codes[positions][:, index])
    every = codes_at(engine, attrs, None)
    assert every is not None
    np.testing.assert_array_equal(every, data.codes[:, index])


def test_duckdb_numbers_the_rows_of_a_directory_in_path_order(tmp_path: Path) -> None:
    from engine.counting import codes_at

    data = _sparse_dataset(DOMAIN, 300, 13)
    folder = tmp_path / "codes"
    folder.mkdir()
    write_codes(Dataset(DOMAIN, data.codes[:100]), folder / "part-0.parquet")
    write_codes(Dataset(DOMAIN, data.codes[100:]), folder / "part-1.parquet")
    engine = DuckDBCounts(folder, DOMAIN)
    positions = np.array([250, 5, 100, 99], dtype=np.intp)
    got = codes_at(engine, ["x", "y"], positions)
    assert got is not None
    np.testing.assert_array_equal(got, data.codes[positions][:, [3, 4]])


@pytest.mark.parametrize("kind", ["duckdb", "spark"])
def test_engines_read_and_number_the_same_files_of_a_directory(
    tmp_path: Path, request: pytest.FixtureRequest, kind: str
) -> None:
    """DuckDB and Spark read the same files (Spark skips ``_…`` and ``.…`` names; DuckDB's glob
    took them) and number their rows in the same path order (Spark's ``file_path`` is an
    escaped URI: ``a b`` sorted as ``a%20b`` came after ``a!``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from engine.counting import codes_at

    folder = tmp_path / "codes"
    (folder / "_temporary").mkdir(parents=True)
    names = ["a b.parquet", "a!.parquet", "a%21.parquet", "_x.parquet", ".h.parquet"]
    names += ["\u00e9.parquet", "_temporary/part.parquet"]
    for i, name in enumerate(names):
        pq.write_table(pa.table({"x": pa.array([i, i], pa.uint8())}), folder / name)
    domain = Domain.from_mapping({"x": len(names)})
    if kind == "duckdb":
        engine: CountingEngine = DuckDBCounts(folder, domain)
    else:
        from engine.counting.spark import SparkCounts

        engine = SparkCounts(folder, domain, session=request.getfixturevalue("spark"))
    expected = [0, 0, 1, 1, 2, 2, 5, 5]  # the visible files, in the order of their names
    assert engine.n_rows == len(expected)
    every = codes_at(engine, ["x"], None)
    assert every is not None and every.ravel().tolist() == expected
    some = codes_at(engine, ["x"], np.array([7, 2, 0, 5]))
    assert some is not None and some.ravel().tolist() == [5, 1, 0, 2]


def test_recognising_an_engine_reads_nothing() -> None:
    assert is_counting_engine(_Untouchable())
    assert is_counting_engine(seeded_dataset())
    assert not is_counting_engine(seeded_dataset().codes)


def test_a_non_engine_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="Dataset or a CountingEngine"):
        seeded_run("independent", object())  # type: ignore[arg-type]


def _write_column(path: Path, column: Any) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"secret": column}), path)


@pytest.mark.parametrize(
    ("column", "message"),
    [
        ([1, None, 2], "missing codes"),  # a null was counted as code 0
        (["Alice", "Bob", "Carol"], "no integer codes"),  # the value was in the error message
        ([1.7, 2.2, 0.5], "no integer codes"),  # the codes were truncated
    ],
)
def test_duckdb_refuses_codes_that_are_not_integers_naming_only_the_column(
    tmp_path: Path, column: list[Any], message: str
) -> None:
    _write_column(tmp_path / "c.parquet", column)
    engine = DuckDBCounts(tmp_path / "c.parquet", Domain.from_mapping({"secret": 5}))
    with pytest.raises(ValueError, match=f"column 'secret' has {message}") as info:
        engine.counts([("secret",)])
    assert "Alice" not in str(info.value)


@pytest.mark.parametrize(
    ("column", "message"),
    [([1, None, 2], "missing codes"), (["Alice", "Bob", "Carol"], "no integer codes")],
)
def test_spark_refuses_codes_that_are_not_integers_naming_only_the_column(
    tmp_path: Path, request: pytest.FixtureRequest, column: list[Any], message: str
) -> None:
    _write_column(tmp_path / "c.parquet", column)
    from engine.counting.spark import SparkCounts

    session = request.getfixturevalue("spark")
    engine = SparkCounts(
        tmp_path / "c.parquet", Domain.from_mapping({"secret": 5}), session=session
    )
    with pytest.raises(ValueError, match=f"column 'secret' has {message}") as info:
        engine.counts([("secret",)])
    assert "Alice" not in str(info.value)


@pytest.mark.parametrize("batched", [False, True])
def test_spark_errors_never_quote_the_data(
    tmp_path: Path, request: pytest.FixtureRequest, batched: bool
) -> None:
    """Spark's own message quotes the value it failed to cast (``[CAST_INVALID_INPUT] The value
    'Alice' …``): a re-coded count over a column of strings casts it in the query."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from engine.counting import recoded_engine
    from engine.counting.spark import SparkCounts

    pq.write_table(
        pa.table({"secret": ["Alice", "1"], "y": pa.array([0, 1], pa.uint8())}),
        tmp_path / "c.parquet",
    )
    domain = Domain.from_mapping({"secret": 5, "y": 2})
    engine = SparkCounts(tmp_path / "c.parquet", domain, session=request.getfixturevalue("spark"))
    engine.batched = batched
    recoded = recoded_engine(
        engine, Domain(domain.attributes, (2, 2)), (np.array([0, 1, 1, 1, 1]), None)
    )
    with pytest.raises(RuntimeError, match="Spark could not count") as info:
        recoded.counts([("secret",), ("secret", "y")])
    assert "Alice" not in str(info.value)
    assert info.value.__context__ is None and info.value.__cause__ is None


def test_duckdb_never_installs_or_loads_an_extension_by_itself(tmp_path: Path) -> None:
    """Nothing is downloaded at run time: a path such as https://… must not fetch httpfs."""
    write_codes(_sparse_dataset(DOMAIN, 3, 7), tmp_path / "c.parquet")
    connection = DuckDBCounts(tmp_path / "c.parquet", DOMAIN)._connection
    for setting in ("autoinstall_known_extensions", "autoload_known_extensions"):
        row = connection.execute(f"SELECT current_setting('{setting}')").fetchone()
        assert row is not None and row[0] is False, setting


def test_duckdb_errors_never_quote_the_data(tmp_path: Path) -> None:
    """DuckDB's own message quotes the value it failed to cast (files of mixed schemas)."""
    folder = tmp_path / "codes"
    folder.mkdir()
    _write_column(folder / "p0.parquet", [1, 2])
    _write_column(folder / "p1.parquet", ["Alice", "Bob"])
    engine = DuckDBCounts(folder, Domain.from_mapping({"secret": 5}))
    with pytest.raises(RuntimeError, match="DuckDB could not count the table of 'secret'") as info:
        engine.counts([("secret",)])
    assert "Alice" not in str(info.value)
    assert info.value.__context__ is None and info.value.__cause__ is None


def test_the_digest_script_runs_on_a_tree_without_engine_counting() -> None:
    """The pinned digests are reproducible on main's tree before issue 29 (as they were made)."""
    import subprocess
    import sys

    # The engine's own modules import engine.counting here; digests.py itself must not.
    script = (
        "import sys, engine.mechanisms; sys.modules['engine.counting'] = None; "
        "import tests.engine.counting.digests"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-500:]


def test_a_method_must_define_how_it_synthesises() -> None:
    """Neither ``_synthesize`` nor ``_synthesize_counts``: refused when the class is defined
    (the base's ``_synthesize`` forwards to ``_synthesize_counts`` for the counting methods)."""
    from engine.mechanisms.base import Mechanism
    from engine.mechanisms.independent.mechanism import IndependentParams

    with pytest.raises(TypeError, match="neither _synthesize nor _synthesize_counts"):

        class _Nothing(Mechanism):
            name = "nothing"
            description = "test double"
            Params = IndependentParams


class _Recording:
    """A counting engine over a Dataset that records every request."""

    def __init__(self, data: Dataset) -> None:
        self.data = data
        self.requests: list[list[tuple[str, ...]]] = []

    @property
    def domain(self) -> Domain:
        return self.data.domain

    @property
    def n_rows(self) -> int:
        return self.data.n_rows

    def counts(self, attribute_sets: Sequence[Sequence[str]]) -> list[IntArray]:
        self.requests.append([tuple(a) for a in attribute_sets])
        return self.data.counts(attribute_sets)


def test_marginal_cache_over_an_engine_batches_and_keeps_tables() -> None:
    from engine.marginals import MarginalCache

    data = _sparse_dataset(DOMAIN, 400, 10)
    engine = _Recording(data)
    cache = MarginalCache(engine, max_cells=50, kept_bytes=10_000)
    small = [("a.b", "y"), ("age group", "y"), ("a.b", "age group")]
    cache.prefetch([*small, ("x", "y")])  # x·y has 600 cells: not kept, not prefetched
    assert engine.requests == [small]
    for attrs in small:
        np.testing.assert_array_equal(cache(attrs), count_marginal(data, attrs))
    assert len(engine.requests) == 1  # answered from the cache
    for _ in range(3):
        np.testing.assert_array_equal(cache(("x", "y")), count_marginal(data, ("x", "y")))
    # Counted when first asked and again when asked a second time (then kept: 4,800 bytes).
    assert engine.requests[1:] == [[("x", "y")], [("x", "y")]]
    cache.prefetch(small)
    assert len(engine.requests) == 3  # nothing new to count


def test_a_dataset_cache_is_not_prefetched() -> None:
    """On codes in memory ``prefetch`` does nothing (tables counted when asked, as before)."""
    from engine.marginals import MarginalCache

    cache = MarginalCache(_sparse_dataset(DOMAIN, 50, 11), max_cells=50)
    cache.prefetch([("a.b", "y"), ("age group", "y")])
    assert cache.held_bytes == 0


@pytest.mark.parametrize("name", ["mst", "dpcopula"])
def test_a_privacy_unit_runs_the_same_through_an_engine(tmp_path: Path, name: str) -> None:
    """contribution_bound k: the run at ρ/k², stated per unit, is the same release on DuckDB."""
    data = rare_dataset()
    engine = _engine("duckdb", data, tmp_path / "c.parquet", None)  # type: ignore[arg-type]
    mechanism = MECHANISMS[name]
    results = [
        mechanism.run(
            source,
            Fraction(1, 4),
            mechanism.validate_params({}),
            rng=np.random.default_rng(3),
            rows=200,
            noise_source=random.Random(17),
            contribution_bound=3,
        )
        for source in (data, engine)
    ]
    assert _released(results[0]) == _released(results[1])
    assert results[1].rho_used == Fraction(1, 4)
    assert all(m.sensitivity == 3 for m in results[1].measurements)


def test_dpcopula_kendall_without_partitions_reads_only_its_subsample(tmp_path: Path) -> None:
    """One partition (hybrid off): the rows read by position are the Kendall subsample only
    (at most ``kendall_max_rows``), never every row, and the release is numpy's."""
    data = rare_dataset()
    write_codes(data, tmp_path / "c.parquet")
    engine = DuckDBCounts(tmp_path / "c.parquet", data.domain)
    asked: list[int] = []
    read = engine.codes_at

    def spy(attrs: Sequence[str], positions: IntArray | None) -> IntArray:
        assert positions is not None, "every row was read"
        asked.append(len(positions))
        return read(attrs, positions)

    engine.codes_at = spy  # type: ignore[method-assign]
    mechanism = MECHANISMS["dpcopula"]
    params = mechanism.validate_params({"hybrid": False, "kendall_max_rows": 500})
    results = [
        mechanism.run(
            source,
            Fraction(1, 4),
            params,
            rng=np.random.default_rng(3),
            rows=200,
            noise_source=random.Random(17),
        )
        for source in (data, engine)
    ]
    assert asked == [500]
    assert _released(results[0]) == _released(results[1])


def test_engine_refusal_is_decided_from_method_and_params_alone() -> None:
    """What the service refuses at submission for a registered source (app/jobs/service.py)
    is exactly what ``run`` refuses on an engine: DPCopula-MLE only."""
    from engine.mechanisms import MECHANISMS, get_mechanism

    for name in MECHANISMS:
        mechanism = get_mechanism(name)
        assert mechanism.engine_refusal(mechanism.validate_params({})) is None, name
    dpcopula = get_mechanism("dpcopula")
    refusal = dpcopula.engine_refusal(dpcopula.validate_params({"correlation": "mle"}))
    assert refusal is not None and "'mle'" in refusal
