"""``rhosynth synthesize --save-model`` and ``rhosynth sample`` (engine/cli.py)."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner, Result

from app.cli import ENGINE_COMMANDS, main
from engine.cli import sample
from engine.mechanisms import MECHANISMS
from engine.models.fitted import ModelError
from engine.release.model_file import read_model_file
from engine.tables.encoding import TableSchema
from engine.tables.local import load_table

SCHEMA = {
    "columns": [
        {"name": "city", "type": "categorical", "categories": ["Lyon", "Paris", "Nantes"]},
        {"name": "age", "type": "numeric", "min": 0, "max": 100, "bins": 10, "integer": True},
        {"name": "member", "type": "boolean"},
        {"name": "tier", "type": "codes", "size": 4},
    ]
}


def invoke(*args: str | Path) -> Result:
    return CliRunner().invoke(main, [str(arg) for arg in args])


@pytest.fixture
def table(tmp_path: Path) -> tuple[Path, Path]:
    rng = np.random.default_rng(2)
    n = 300
    frame = pd.DataFrame(
        {
            "city": rng.choice(["Lyon", "Paris", "Nantes"], n),
            "age": rng.integers(0, 100, n),
            "member": rng.choice(["true", "false"], n),
            "tier": rng.integers(0, 4, n),
        }
    )
    data = tmp_path / "data.csv"
    frame.to_csv(data, index=False)
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(SCHEMA))
    return data, schema


def synthesize(data: Path, schema: Path, out: Path, model: Path, method: str) -> Result:
    fast = ("--param", "iterations=20") if method == "mst" else ()
    return invoke(
        "synthesize", data, "--schema", schema, "--method", method, "--rho", "1", *fast,
        "--seed", "3", "--out", out, "--save-model", model,
    )  # fmt: skip


def assert_refused(result: Result, *fragments: str) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in result.output, result.output


@pytest.mark.parametrize("method", ["mst", "independent"])
def test_save_model_then_sample_is_reproducible_and_decodes_to_the_schema(
    tmp_path: Path, table: tuple[Path, Path], method: str
) -> None:
    data, schema_path = table
    out, model = tmp_path / "out.csv", tmp_path / "model.rsm"
    done = synthesize(data, schema_path, out, model, method)
    assert done.exit_code == 0, done.output
    assert model.exists() and out.exists()
    fitted, schema = read_model_file(model.read_bytes())
    assert fitted.method == method
    assert schema.to_json() == TableSchema.from_json(SCHEMA).to_json()

    first, second, other = tmp_path / "a.csv", tmp_path / "b.csv", tmp_path / "c.csv"
    for path, seed in ((first, "5"), (second, "5"), (other, "6")):
        result = invoke("sample", model, "--rows", "200", "--seed", seed, "--out", path)
        assert result.exit_code == 0, result.output
        assert f"{method} model: 200 rows" in result.stderr
    assert first.read_bytes() == second.read_bytes()
    assert first.read_bytes() != other.read_bytes()

    # Written like synthesize's output: the same header, integers as integers, booleans as
    # declared, categories from the schema; and it reads back through the schema.
    frame = pd.read_csv(first)
    assert list(frame.columns) == list(pd.read_csv(out).columns) == list(schema.names)
    assert len(frame) == 200
    assert np.issubdtype(frame["age"].to_numpy().dtype, np.integer)
    assert frame["age"].between(0, 100).all()
    assert np.issubdtype(frame["tier"].to_numpy().dtype, np.integer)
    assert set(frame["city"]) <= {"Lyon", "Paris", "Nantes"}
    assert set(frame["member"].astype(str).str.lower()) <= {"true", "false"}
    assert load_table(first, schema).shape == (200, 4)

    parquet = tmp_path / "rows.data"
    result = invoke("sample", model, "--rows", "50", "--seed", "5", "--out", parquet,
                    "--format", "parquet")  # fmt: skip
    assert result.exit_code == 0, result.output
    read = pq.read_table(parquet).to_pandas()
    assert len(read) == 50
    assert str(read["age"].dtype).startswith("int")


def test_sample_defaults_to_the_models_noisy_row_count(
    tmp_path: Path, table: tuple[Path, Path]
) -> None:
    data, schema_path = table
    model = tmp_path / "model.rsm"
    assert synthesize(data, schema_path, tmp_path / "o.csv", model, "independent").exit_code == 0
    fitted, _ = read_model_file(model.read_bytes())
    result = invoke("sample", model, "--out", tmp_path / "rows.csv")
    assert result.exit_code == 0, result.output
    assert len(pd.read_csv(tmp_path / "rows.csv")) == max(1, round(fitted.estimated_total))


def test_save_model_is_refused_before_spending_for_a_method_without_a_model(
    tmp_path: Path, table: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, schema_path = table
    monkeypatch.setattr(MECHANISMS["independent"], "resamplable", False)
    # DATA does not even exist: the refusal comes before anything is read or run.
    result = synthesize(
        tmp_path / "missing.csv", schema_path, tmp_path / "o.csv", tmp_path / "m", "independent"
    )
    assert_refused(result, "--save-model", "keeps no re-samplable model")
    assert not (tmp_path / "o.csv").exists()
    assert not (tmp_path / "m").exists()


def test_sample_refuses_bad_model_files(tmp_path: Path, table: tuple[Path, Path]) -> None:
    data, schema_path = table
    model = tmp_path / "model.rsm"
    assert synthesize(data, schema_path, tmp_path / "o.csv", model, "mst").exit_code == 0
    good = model.read_bytes()

    junk = tmp_path / "junk"
    junk.write_bytes(b"junk")
    assert_refused(invoke("sample", junk, "--out", tmp_path / "x.csv"), "MODEL")
    assert_refused(invoke("sample", tmp_path / "nope", "--out", tmp_path / "x.csv"), "exist")

    # A pickled object in place of the schema: refused, nothing unpickled.
    with zipfile.ZipFile(io.BytesIO(good)) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    buffer = io.BytesIO()
    np.save(buffer, np.array([{"evil": 1}], dtype=object), allow_pickle=True)
    members["schema.npy"] = buffer.getvalue()
    tampered = io.BytesIO()
    with zipfile.ZipFile(tampered, "w") as archive:
        for name, content in members.items():
            archive.writestr(name, content)
    with pytest.raises(ModelError):
        read_model_file(tampered.getvalue())
    bad = tmp_path / "bad.rsm"
    bad.write_bytes(tampered.getvalue())
    assert_refused(invoke("sample", bad, "--out", tmp_path / "x.csv"), "MODEL")
    assert not (tmp_path / "x.csv").exists()

    # A schema that does not describe the model.
    other = dict(SCHEMA, columns=SCHEMA["columns"][:3])
    members["schema.npy"] = _npy_bytes(json.dumps(other).encode())
    swapped = io.BytesIO()
    with zipfile.ZipFile(swapped, "w") as archive:
        for name, content in members.items():
            archive.writestr(name, content)
    with pytest.raises(ModelError):
        read_model_file(swapped.getvalue())


def _npy_bytes(data: bytes) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.frombuffer(data, dtype=np.uint8))
    return buffer.getvalue()


def test_save_model_refuses_overwriting_the_output(
    tmp_path: Path, table: tuple[Path, Path]
) -> None:
    data, schema_path = table
    out = tmp_path / "o.csv"
    assert_refused(synthesize(data, schema_path, out, out, "mst"), "different files")


def test_sample_is_registered_in_the_rhosynth_group() -> None:
    assert ENGINE_COMMANDS["sample"][2] == sample.get_short_help_str(limit=200)
    result = invoke("sample", "--help")
    assert result.exit_code == 0
    assert "--rows" in result.output and "--format" in result.output


def test_save_record_feeds_the_release_tier_of_report(table: tuple[Path, Path]) -> None:
    from engine.release.record import ReleaseRecord

    data, schema = table
    folder = data.parent
    out, record = folder / "synthetic.csv", folder / "release.npz"
    result = invoke(
        "synthesize", data, "--schema", schema, "--method", "mst", "--rho", "1",
        "--param", "iterations=20", "--seed", "3", "--out", out, "--save-record", record,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    loaded = ReleaseRecord.from_bytes(record.read_bytes())
    assert loaded.method == "mst" and str(loaded.rho) == "1"
    assert {m.attributes for m in loaded.marginals if len(m.attributes) == 1} == {
        (name,) for name in ("city", "age", "member", "tier")
    }
    pages = [folder / name for name in ("owner.html", "release.html", "release.json")]
    result = invoke(
        "report", data, out, "--schema", schema, "--html", pages[0], "--record", record,
        "--release-html", pages[1], "--release-json", pages[2],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    release = json.loads(pages[2].read_text())
    assert release["tier"] == "release" and release["method"] == "mst"
    same_file = invoke(
        "synthesize", data, "--schema", schema, "--method", "independent", "--rho", "1",
        "--out", out, "--save-record", out,
    )  # fmt: skip
    assert_refused(same_file, "--save-record")


def test_synthesize_and_sample_keep_the_schemas_rules(
    tmp_path: Path, table: tuple[Path, Path]
) -> None:
    """Issue 28 §2: the CLI keeps declared rules and says what that did."""
    data, schema = table
    ruled = dict(SCHEMA, rules=[
        {"compare": ["age", ">=", 30], "if": {"city": ["Lyon"]}},
        {"allowed": {"columns": ["member", "tier"], "combinations": [[True, 0], [False, 3]]}},
    ])  # fmt: skip
    schema.write_text(json.dumps(ruled))
    out, model = tmp_path / "out.csv", tmp_path / "model.npz"
    result = synthesize(data, schema, out, model, "independent")
    assert result.exit_code == 0, result.output
    assert "rules:" in result.output and "0 still breaking" in result.output
    drawn = tmp_path / "drawn.csv"
    result = invoke("sample", model, "--rows", "500", "--seed", "1", "--out", drawn)
    assert result.exit_code == 0, result.output
    for path in (out, drawn):
        frame = pd.read_csv(path)
        assert not ((frame["city"] == "Lyon") & (frame["age"] < 30)).any()
        pairs = set(zip(frame["member"].astype(str), frame["tier"], strict=True))
        assert pairs <= {("True", 0), ("False", 3)}
