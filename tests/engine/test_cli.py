"""``rhosynth synthesize`` and ``rhosynth evaluate`` (engine/cli.py) on local files.

Most tests drive the real ``rhosynth`` click group in-process with CliRunner; a few run the
installed ``.venv/bin/rhosynth`` as a subprocess. Tests that read ../shared are skipped when it is
absent (as in CI).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner, Result

from app.cli import ENGINE_COMMANDS, main
from engine.accounting import rho_from_epsilon_delta
from engine.cli import ProgressBar, evaluate, parse_params, parse_rho, synthesize
from engine.columns.spreadsheet import unescape_cell
from engine.evaluation import mean_tvd
from engine.mechanisms import MECHANISMS
from engine.tables.encoding import CategoricalColumn, NumericColumn, TableSchema
from engine.tables.local import TableError, load_schema, load_table

FIXTURES = Path(__file__).parents[1] / "fixtures"
PEOPLE = FIXTURES / "people.csv"
PEOPLE_SCHEMA = FIXTURES / "people-schema.json"
ADULT = FIXTURES / "adult-sample.csv"
ADULT_SCHEMA = FIXTURES / "adult-domain.json"
SHARED = Path(__file__).resolve().parents[3] / "shared"
SHARED_ADULT = SHARED / "data" / "adult"
SHARED_EVALUATOR = SHARED / "bench" / "marginal_error.py"
RHOSYNTH = Path(sys.executable).parent / "rhosynth"
SUMMARY = re.compile(
    r"^(?P<method>\w+): rho=(?P<rho>[0-9.]+)(?: \(epsilon=\S+, delta=\S+\))?, "
    r"(?P<rows>\d+) rows, [0-9.]+ s -> (?P<out>.+)$"
)


def invoke(*args: str | Path) -> Result:
    return CliRunner().invoke(main, [str(arg) for arg in args])


def synthesize_people(out: Path, *extra: str | Path) -> Result:
    return invoke(
        "synthesize", PEOPLE, "--schema", PEOPLE_SCHEMA, "--method", "independent", "--out", out,
        *extra,
    )  # fmt: skip


def read_people_output(path: Path) -> pd.DataFrame:
    if path.suffix == ".parquet":
        return pd.read_parquet(path)
    frame = pd.read_csv(path, dtype={"city": str}, keep_default_na=False)
    # The CSV escapes formula-like cells (=HYPERLINK…, -minus, @at) as the service does.
    frame["city"] = frame["city"].map(unescape_cell)
    return frame


def assert_people_in_domain(frame: pd.DataFrame) -> None:
    schema = load_schema(PEOPLE_SCHEMA)
    assert list(frame.columns) == list(schema.names)
    city = schema.column("city")
    age = schema.column("age")
    income = schema.column("income")
    assert isinstance(city, CategoricalColumn)
    assert isinstance(age, NumericColumn)
    assert isinstance(income, NumericColumn)
    assert set(frame["city"].astype(str)) <= set(city.categories)
    assert frame["age"].between(age.edges[0], age.edges[-1]).all()
    assert frame["income"].between(income.edges[0], income.edges[-1]).all()
    tier = frame["tier"].to_numpy()
    assert np.issubdtype(tier.dtype, np.integer)
    assert tier.min() >= 0
    assert tier.max() < 4


def summary_of(result: Result) -> re.Match[str]:
    last = result.stderr.strip().splitlines()[-1].split("\r")[-1]
    match = SUMMARY.match(last)
    assert match, result.stderr
    return match


def assert_refused(result: Result, *fragments: str) -> None:
    """Exit 2, an error message containing ``fragments``, and no traceback."""
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in result.output, result.output


# --------------------------------------------------------------------------------------------
# Registration in the rhosynth group
# --------------------------------------------------------------------------------------------


def test_help_lists_the_engine_commands_without_importing_them() -> None:
    code = (
        "import sys\n"
        "from app.cli import main\n"
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print([m for m in ('engine', 'engine.cli', 'numpy', 'pandas') if m in sys.modules])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert "synthesize" in done.stdout
    assert "evaluate" in done.stdout
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_listed_short_help_matches_the_commands() -> None:
    assert ENGINE_COMMANDS["synthesize"][2] == synthesize.get_short_help_str(limit=200)
    assert ENGINE_COMMANDS["evaluate"][2] == evaluate.get_short_help_str(limit=200)


def test_synthesize_never_imports_the_service_stack(tmp_path: Path) -> None:
    out = tmp_path / "out.csv"
    code = (
        "import sys\n"
        "from app.cli import main\n"
        f"args = ['synthesize', {str(PEOPLE)!r}, '--schema', {str(PEOPLE_SCHEMA)!r},\n"
        f"        '--method', 'independent', '--rho', '1', '--out', {str(out)!r}]\n"
        "try:\n"
        "    main(args)\n"
        "except SystemExit as exit:\n"
        "    assert exit.code in (0, None), exit.code\n"
        "service = ('fastapi', 'starlette', 'uvicorn', 'sqlalchemy', 'alembic', 'psycopg',\n"
        "           'celery', 'kombu', 'redis', 'workers', 'app.db', 'app.api', 'app.jobs')\n"
        "print(sorted(m for m in sys.modules if m.startswith(service)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip().splitlines()[-1] == "[]"
    assert out.exists()


# --------------------------------------------------------------------------------------------
# synthesize
# --------------------------------------------------------------------------------------------


def test_synthesize_people_writes_the_original_value_space(tmp_path: Path) -> None:
    out = tmp_path / "people.csv"
    result = synthesize_people(out, "--rho", "10", "--seed", "1")
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    frame = read_people_output(out)
    assert_people_in_domain(frame)
    # Default row count: the noisy estimate of n = 400, very close at ρ = 10.
    assert abs(len(frame) - 400) <= 10
    summary = summary_of(result)
    assert summary["method"] == "independent"
    assert summary["rho"] == "10"
    assert int(summary["rows"]) == len(frame)
    # The output encodes back into the declared domain (numeric values fall inside their bins).
    codes = load_table(out, load_schema(PEOPLE_SCHEMA))
    assert codes.shape == (len(frame), 4)


# Quick settings per method (defaults otherwise); every registered method must be listed.
CLI_PARAMS: dict[str, list[str]] = {
    "independent": [],
    "mst": ["--param", "iterations=200"],
    "aim": ["--param", "rounds=8", "--param", "round_iterations=20", "--param", "iterations=200"],
    "privsyn": ["--param", "iterations=20"],
    "ppsyn": ["--param", "rounds=6", "--param", "round_iterations=20", "--param", "iterations=200"],
    "privmrf": ["--param", "round_iterations=10", "--param", "iterations=100"],
    "dpcopula": [],
    "cipher": [],
}


def test_every_registered_method_is_exercised() -> None:
    assert set(CLI_PARAMS) == set(MECHANISMS)


@pytest.mark.parametrize(("method", "params"), sorted(CLI_PARAMS.items()))
def test_every_method_decodes_to_the_declared_domain(
    tmp_path: Path, method: str, params: list[str]
) -> None:
    out = tmp_path / f"people-{method}.csv"
    result = invoke(
        "synthesize", PEOPLE, "--schema", PEOPLE_SCHEMA, "--method", method, "--rho", "2",
        "--seed", "3", *params, "--out", out,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    frame = read_people_output(out)
    assert_people_in_domain(frame)
    assert abs(len(frame) - 400) <= 40
    assert summary_of(result)["method"] == method
    assert load_table(out, load_schema(PEOPLE_SCHEMA)).shape == (len(frame), 4)


def test_synthesize_honours_rows_and_writes_parquet(tmp_path: Path) -> None:
    out = tmp_path / "people.parquet"
    result = synthesize_people(out, "--rho", "0.5", "--rows", "123", "--seed", "7")
    assert result.exit_code == 0, result.output
    frame = read_people_output(out)
    assert len(frame) == 123
    assert_people_in_domain(frame)
    assert out.read_bytes()[:4] == b"PAR1"
    assert load_table(out, load_schema(PEOPLE_SCHEMA)).shape == (123, 4)


def test_synthesize_from_epsilon_delta(tmp_path: Path) -> None:
    out = tmp_path / "adult.csv"
    result = invoke(
        "synthesize", ADULT, "--schema", ADULT_SCHEMA, "--method", "independent",
        "--epsilon", "1", "--delta", "1e-9", "--out", out,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    summary = summary_of(result)
    expected = rho_from_epsilon_delta(Decimal(1), Decimal("1e-9"))
    assert Decimal(summary["rho"]) == expected
    assert "(epsilon=1, delta=1e-9)" in result.stderr


def test_synthesize_reads_parquet_and_any_column_order(tmp_path: Path) -> None:
    frame = pd.read_csv(PEOPLE, dtype={"city": str}, keep_default_na=False)
    source = tmp_path / "people-in.parquet"
    frame[["income", "tier", "city", "age"]].to_parquet(source)
    out = tmp_path / "people.csv"
    result = invoke(
        "synthesize", source, "--schema", PEOPLE_SCHEMA, "--method", "independent",
        "--rho", "5", "--rows", "50", "--out", out,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert_people_in_domain(read_people_output(out))


def test_progress_bar_is_drawn_on_stderr(tmp_path: Path) -> None:
    result = synthesize_people(tmp_path / "p.csv", "--rho", "1", "--progress")
    assert result.exit_code == 0, result.output
    assert "\r[" in result.stderr
    assert "100% sample" in result.stderr
    assert result.stderr.endswith("\n")
    summary_of(result)
    quiet = synthesize_people(tmp_path / "q.csv", "--rho", "1", "--no-progress")
    assert "\r" not in quiet.stderr
    assert len(quiet.stderr.strip().splitlines()) == 1


def test_progress_bar_redraws_only_on_change(capsys: pytest.CaptureFixture[str]) -> None:
    bar = ProgressBar(width=10)
    bar(0.0, "measure")
    bar(0.001, "measure")
    bar(0.5, "measure")
    bar(0.5, "sample")
    bar.close()
    err = capsys.readouterr().err
    assert err.count("\r") == 3
    assert "[#####.....]  50% sample" in err
    assert err.endswith("\n")


@pytest.mark.skipif(not RHOSYNTH.exists(), reason="the rhosynth script is not installed")
@pytest.mark.parametrize(
    ("data", "schema", "budget"),
    [
        (PEOPLE, PEOPLE_SCHEMA, ["--rho", "2"]),
        (ADULT, ADULT_SCHEMA, ["--epsilon", "1", "--delta", "1e-9"]),
    ],
)
def test_the_installed_command_in_a_subprocess(
    tmp_path: Path, data: Path, schema: Path, budget: list[str]
) -> None:
    out = tmp_path / "synthetic.csv"
    done = subprocess.run(
        [str(RHOSYNTH), "synthesize", str(data), "--schema", str(schema), "--method",
         "independent", *budget, "--seed", "3", "--out", str(out)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    table_schema = load_schema(schema)
    codes = load_table(out, table_schema)  # every value decodes back into the declared domain
    n_real = len(load_table(data, table_schema))
    # ρ = 2 on 4 columns, or ε = 1 (ρ ≈ 0.015) on 14: the noisy total is within a few σ of n.
    assert abs(len(codes) - n_real) <= 0.1 * n_real
    assert (codes >= 0).all()
    assert (codes < np.asarray(table_schema.domain().sizes)).all()
    if schema == ADULT_SCHEMA:
        frame = pd.read_csv(out)
        assert list(frame.columns) == list(table_schema.names)
        assert all(np.issubdtype(dtype, np.integer) for dtype in frame.dtypes)


@pytest.mark.skipif(not SHARED_ADULT.exists(), reason="../shared/data is not available")
def test_synthesize_accepts_the_shared_benchmark_files(tmp_path: Path) -> None:
    out = tmp_path / "adult.csv"
    result = invoke(
        "synthesize", SHARED_ADULT / "adult.csv", "--schema", SHARED_ADULT / "adult-domain.json",
        "--method", "independent", "--epsilon", "1", "--delta", "1e-9", "--out", out,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert abs(len(pd.read_csv(out)) - 48_842) < 500
    if SHARED_EVALUATOR.exists():
        scores = json.loads(
            invoke(
                "evaluate", SHARED_ADULT / "adult.csv", out,
                "--schema", SHARED_ADULT / "adult-domain.json", "--max-way", "2",
            ).stdout
        )  # fmt: skip
        done = subprocess.run(
            [sys.executable, str(SHARED_EVALUATOR), str(SHARED_ADULT / "adult.csv"), str(out),
             str(SHARED_ADULT / "adult-domain.json"), "--max-way", "2",
             "--json", str(tmp_path / "ref.json")],
            capture_output=True, check=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0
        reference = json.loads((tmp_path / "ref.json").read_text())
        for k in ("1", "2"):
            assert scores[k] == pytest.approx(reference["ways"][k]["mean_tvd"], abs=1e-12)


# --------------------------------------------------------------------------------------------
# synthesize: refusals
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["--method", "nope", "--rho", "1"], ["unknown method 'nope'", "independent"]),
        (["--method", "independent", "--rho", "1", "--param", "x=1"], ["--param", "'x'"]),
        (["--method", "independent", "--rho", "1", "--param", "novalue"], ["key=value"]),
        (["--method", "independent", "--rho", "0"], ["--rho must be positive"]),
        (["--method", "independent", "--rho", "-1"], ["--rho must be positive"]),
        (["--method", "independent", "--rho", "abc"], ["--rho must be a decimal"]),
        (["--method", "independent", "--rho", "nan"], ["--rho must be a finite"]),
        (["--method", "independent", "--rho", "1e-13"], ["12 decimal places"]),
        (["--method", "independent", "--rho", "1e999999999"], ["out of range"]),
        (["--method", "independent", "--epsilon", "1"], ["together"]),
        (["--method", "independent", "--delta", "1e-9"], ["together"]),
        (["--method", "independent"], ["a budget is required"]),
        (
            ["--method", "independent", "--rho", "1", "--epsilon", "1", "--delta", "0.1"],
            ["not both"],
        ),
        (["--method", "independent", "--epsilon", "1", "--delta", "0"], ["--delta"]),
        (["--method", "independent", "--epsilon", "1", "--delta", "1"], ["--delta"]),
        (["--method", "independent", "--epsilon", "1", "--delta", "1.5"], ["--delta"]),
        (["--method", "independent", "--epsilon", "0", "--delta", "0.1"], ["--epsilon"]),
        (["--method", "independent", "--epsilon", "1001", "--delta", "0.1"], ["--epsilon"]),
        (["--method", "independent", "--epsilon", "1e-30", "--delta", "1e-30"], ["rho"]),
        (["--method", "independent", "--rho", "1", "--rows", "0"], ["--rows"]),
        (["--method", "independent", "--rho", "1", "--seed", "-1"], ["--seed"]),
    ],
)
def test_bad_options_are_refused(tmp_path: Path, args: list[str], fragments: list[str]) -> None:
    out = tmp_path / "out.csv"
    result = invoke("synthesize", PEOPLE, "--schema", PEOPLE_SCHEMA, "--out", out, *args)
    assert_refused(result, *fragments)
    assert not out.exists()


def write_people_variant(tmp_path: Path, name: str = "people.csv") -> tuple[Path, pd.DataFrame]:
    frame = pd.read_csv(PEOPLE, dtype=str, keep_default_na=False)
    return tmp_path / name, frame


@pytest.mark.parametrize(
    ("mutate", "fragments", "secrets"),
    [
        (
            lambda f: f.assign(
                city=["Berlinsecret"] * 3 + list(f["city"][3:]),
                age=["150.25", "150.25", *f["age"][2:]],
            ),
            [
                "column 'city': 3 values not among the declared categories",
                "column 'age': 2 values outside [0, 100], set clip or widen the bounds",
            ],
            ["Berlinsecret", "150.25"],
        ),
        (
            lambda f: f.assign(tier=["7", *f["tier"][1:]]),
            ["column 'tier': 1 value outside the codes 0..3"],
            [],
        ),
        (
            lambda f: f.assign(income=["lots", *f["income"][1:]]),
            ["column 'income': unparseable number in 1 row"],
            ["lots"],
        ),
        (lambda f: f.drop(columns=["tier"]), ["missing columns: 'tier'"], []),
        (lambda f: f.assign(extra="x"), ["columns not in the schema: 'extra'"], []),
        (lambda f: f.iloc[:0], ["no rows"], []),
    ],
)
def test_bad_tables_are_refused_without_echoing_values(
    tmp_path: Path,
    mutate: object,
    fragments: list[str],
    secrets: list[str],
) -> None:
    path, frame = write_people_variant(tmp_path)
    assert callable(mutate)
    mutate(frame).to_csv(path, index=False)
    result = invoke(
        "synthesize", path, "--schema", PEOPLE_SCHEMA, "--method", "independent",
        "--rho", "1", "--out", tmp_path / "out.csv",
    )  # fmt: skip
    assert_refused(result, "DATA", *fragments)
    for secret in secrets:
        assert secret not in result.output


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"", "empty"),
        (b"city,age,tier,income\nLyon,30,1\nLyon,30,1,100\n", "1 row does not have 4 fields"),
        (b"city,age,tier,income\n\xff\xfe,30,1,100\n", "UTF-8"),
        (b"\xff\xfecity,age\n", "neither Parquet nor UTF-8"),
        (b"PAR1 not really parquet", "Parquet"),
        (b"city,city,tier,income\nLyon,Lyon,1,100\n", "duplicate columns"),
    ],
)
def test_unreadable_files_are_refused(tmp_path: Path, content: bytes, fragment: str) -> None:
    path = tmp_path / "data.csv"
    path.write_bytes(content)
    result = invoke(
        "synthesize", path, "--schema", PEOPLE_SCHEMA, "--method", "independent",
        "--rho", "1", "--out", tmp_path / "out.csv",
    )  # fmt: skip
    assert_refused(result, fragment)


@pytest.mark.parametrize(
    ("schema_text", "fragment"),
    [
        (None, "does not exist"),
        ("{not json", "not valid JSON"),
        ('{"columns": [{"name": "a", "type": "wat"}]}', "type must be one of"),
        ('{"a": "big"}', "integer size"),
    ],
)
def test_bad_schemas_are_refused(tmp_path: Path, schema_text: str | None, fragment: str) -> None:
    schema = tmp_path / "schema.json"
    if schema_text is not None:
        schema.write_text(schema_text)
    result = invoke(
        "synthesize", PEOPLE, "--schema", schema, "--method", "independent", "--rho", "1",
        "--out", tmp_path / "out.csv",
    )  # fmt: skip
    assert_refused(result, fragment)


def test_missing_data_and_bad_outputs_are_refused(tmp_path: Path) -> None:
    base: list[str | Path] = ["--schema", PEOPLE_SCHEMA, "--method", "independent", "--rho", "1"]
    assert_refused(
        invoke("synthesize", tmp_path / "nope.csv", *base, "--out", tmp_path / "o.csv"),
        "does not exist",
    )
    assert_refused(
        invoke("synthesize", PEOPLE, *base, "--out", tmp_path / "no" / "dir" / "o.csv"),
        "does not exist",
    )
    assert_refused(invoke("synthesize", PEOPLE, *base, "--out", tmp_path), "directory")
    copy = tmp_path / "copy.csv"
    copy.write_bytes(PEOPLE.read_bytes())
    assert_refused(invoke("synthesize", copy, *base, "--out", copy), "overwrite an input")
    assert copy.read_bytes() == PEOPLE.read_bytes()


def test_a_failing_mechanism_is_a_one_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine.mechanisms.independent.mechanism import IndependentMechanism

    def explode(*_args: object, **_kwargs: object) -> None:
        raise MemoryError("the model does not fit")

    monkeypatch.setattr(IndependentMechanism, "_synthesize", explode)
    result = synthesize_people(tmp_path / "o.csv", "--rho", "1")
    assert_refused(result, "method 'independent' failed: MemoryError: the model does not fit")
    assert not (tmp_path / "o.csv").exists()


# --------------------------------------------------------------------------------------------
# evaluate
# --------------------------------------------------------------------------------------------


def test_a_table_against_itself_scores_zero() -> None:
    result = invoke("evaluate", PEOPLE, PEOPLE, "--schema", PEOPLE_SCHEMA)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report == {"1": 0.0, "2": 0.0, "3": 0.0, "n_real": 400, "n_synth": 400}


def test_a_synthetic_table_scores_between_zero_and_one(tmp_path: Path) -> None:
    out = tmp_path / "people.csv"
    assert synthesize_people(out, "--rho", "1", "--seed", "2").exit_code == 0
    report = json.loads(invoke("evaluate", PEOPLE, out, "--schema", PEOPLE_SCHEMA).stdout)
    assert set(report) == {"1", "2", "3", "n_real", "n_synth"}
    for k in ("1", "2", "3"):
        assert 0 < report[k] < 1
    assert report["1"] < report["2"] < report["3"]
    assert report["n_real"] == 400
    # The same scores as the library on the encoded tables.
    schema = load_schema(PEOPLE_SCHEMA)
    direct = mean_tvd(load_table(PEOPLE, schema), load_table(out, schema), schema.domain())
    assert [report[str(k)] for k in (1, 2, 3)] == [direct[k] for k in (1, 2, 3)]


def test_evaluate_options(tmp_path: Path) -> None:
    out = tmp_path / "adult.csv"
    result = invoke(
        "synthesize", ADULT, "--schema", ADULT_SCHEMA, "--method", "independent",
        "--rho", "0.1", "--out", out,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    base: list[str | Path] = ["evaluate", ADULT, out, "--schema", ADULT_SCHEMA]
    one = json.loads(invoke(*base, "--max-way", "1").stdout)
    assert set(one) == {"1", "n_real", "n_synth"}
    sampled = json.loads(invoke(*base, "--max-marginals", "20", "--seed", "4").stdout)
    assert sampled == json.loads(invoke(*base, "--max-marginals", "20", "--seed", "4").stdout)
    assert sampled["max_marginals"] == 20
    assert all(0 < sampled[k] < 1 for k in ("1", "2", "3"))


def test_evaluate_ignores_extra_columns_and_refuses_bad_tables(tmp_path: Path) -> None:
    frame = pd.read_csv(ADULT)
    extra = tmp_path / "extra.csv"
    frame.assign(note="x").to_csv(extra, index=False)
    report = json.loads(invoke("evaluate", ADULT, extra, "--schema", ADULT_SCHEMA).stdout)
    assert report["3"] == 0.0

    bad = tmp_path / "bad.csv"
    frame.assign(age=[999, *frame["age"][1:]]).to_csv(bad, index=False)
    assert_refused(
        invoke("evaluate", ADULT, bad, "--schema", ADULT_SCHEMA),
        "SYNTH",
        "column 'age': 1 value outside the codes 0..84",
    )
    assert_refused(
        invoke("evaluate", tmp_path / "none.csv", ADULT, "--schema", ADULT_SCHEMA),
        "REAL",
        "does not exist",
    )
    assert_refused(invoke("evaluate", ADULT, ADULT, "--schema", ADULT_SCHEMA, "--max-way", "0"))


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def test_parse_params_reads_json_or_text() -> None:
    assert parse_params(["a=1", "b=[1, 2]", "c=hello", "d=NaN", "e=", "f=0.5", "g=true"]) == {
        "a": 1,
        "b": [1, 2],
        "c": "hello",
        "d": "NaN",
        "e": "",
        "f": 0.5,
        "g": True,
    }
    assert parse_params(["url=a=b"]) == {"url": "a=b"}


def test_parse_rho_is_exact() -> None:
    assert parse_rho("0.5") == Fraction(1, 2)
    assert parse_rho("1E-12") == Fraction(1, 10**12)
    assert parse_rho("0.100000000000000000") == Fraction(1, 10)
    assert parse_rho(" 3 ") == 3


def test_load_table_reports_every_bad_column(tmp_path: Path) -> None:
    schema = TableSchema.from_json({"a": 2, "b": 3})
    path = tmp_path / "t.csv"
    path.write_text("b,a\n0,0\n5,1\n1,9\n2,7\n")
    with pytest.raises(
        TableError, match=r"column 'a': 2 values outside.*column 'b': 1 value outside"
    ):
        load_table(path, schema)
    path.write_text("b,a\n0,0\n2,1\n")
    np.testing.assert_array_equal(load_table(path, schema), [[0, 0], [1, 2]])
