"""One counting interface, three engines (issue 29 §2, first piece).

numpy (:class:`Dataset`), DuckDB and Spark give identical tables on the stored Parquet layout,
the methods that read only counts give byte-identical releases through each, the others refuse
another engine before reading anything, and the default (numpy) path is pinned to the digests
of main's tree before this change. Deterministic: no statistical test, no timing.
"""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Iterator, Sequence
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
    "ppsyn": "d0d336c23319c151b192d2fc2ee43210256c7bb6031943f6bd9f0b0205638174",
    "privmrf": "9a9be54e21427c8d918e33166f7902da9732a55a960702c571fdd1b85811762f",
    "cipher": "15670e43f09208949696b23aa81e30071d5b944d9605c91b44de7eb6c62aeaf5",
    "dpcopula": "25133949a8013ef66ed2cd70e513da2457e5ab52b06b9e9448c8f9fe1b160c77",
}
COUNTS_ONLY = ("independent", "cipher", "mst", "aim", "privsyn", "ppsyn", "privmrf")


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


@pytest.mark.parametrize("kind", ["numpy", "duckdb", "spark"])
@pytest.mark.parametrize("name", COUNTS_ONLY)
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


@pytest.mark.parametrize("name", sorted(set(MAIN_DIGESTS) - set(COUNTS_ONLY)))
def test_row_reading_methods_refuse_another_engine_before_reading(name: str) -> None:
    with pytest.raises(EngineRefused, match="runs only on codes in memory") as info:
        seeded_run(name, _Untouchable())
    assert isinstance(info.value, DomainRefused)  # the service's public refusal
    assert name in str(info.value)


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
