"""benchmarks.raw_fidelity's metrics on tiny constructed tables with known answers, and its
run harness with stand-in peers (no peer package, no ../shared)."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from benchmarks.raw_fidelity import (
    BEGIN,
    END,
    SYSTEMS,
    ColumnKind,
    Row,
    RunSettings,
    canonical,
    category_tvd,
    fidelity,
    holdout_mask,
    ks_statistic,
    missing_gap,
    ml_efficacy,
    outside_share,
    pair_tvd,
    run_system,
    spearman_diff,
    system,
    targets,
    update,
)

NUM = ColumnKind("n", "numeric")
CAT = ColumnKind("c", "categorical")


def test_outside_share_counts_non_missing_values_beyond_the_real_min_and_max() -> None:
    real = pd.Series([0.0, 4.0, 10.0])
    synth = pd.Series([-1.0, 5.0, 11.0, 10.0, np.nan, 0.0])
    assert outside_share(real, synth) == pytest.approx(2 / 5)
    assert outside_share(real, pd.Series([0.0, 10.0])) == 0.0


def test_ks_statistic_known_values() -> None:
    real = pd.Series([1.0, 2.0, 3.0, 4.0])
    assert ks_statistic(real, real.copy()) == 0.0
    assert ks_statistic(real, pd.Series([5.0, 6.0, 7.0, 8.0])) == 1.0
    assert ks_statistic(real, pd.Series([3.0, 4.0, 5.0, 6.0, np.nan])) == pytest.approx(0.5)
    assert ks_statistic(real, pd.Series([np.nan, np.nan])) == 1.0


def test_category_tvd_known_values() -> None:
    real = pd.Series(["a", "a", "b", "b"], dtype=object)
    assert category_tvd(real, pd.Series(["a", "a", "a", "b"], dtype=object)) == pytest.approx(0.25)
    assert category_tvd(real, pd.Series(["c", "c"], dtype=object)) == pytest.approx(1.0)
    # Missing values are left to the missing-rate gap.
    assert category_tvd(real, pd.Series(["a", "b", np.nan], dtype=object)) == pytest.approx(0.0)


def test_missing_gap() -> None:
    real = pd.Series([1.0, np.nan, 3.0, 4.0])
    assert missing_gap(real, pd.Series([np.nan, np.nan, 1.0, 1.0])) == pytest.approx(0.25)


def test_spearman_diff_known_values() -> None:
    real = pd.DataFrame({"x": [1.0, 2, 3, 4], "y": [1.0, 2, 3, 4], "k": [5.0, 5, 5, 5]})
    same = real.copy()
    flipped = real.assign(y=[4.0, 3, 2, 1])
    # (x, k) and (y, k) have an undefined real correlation: left out, one pair remains.
    assert spearman_diff(real, same, ["x", "y", "k"]) == (pytest.approx(0.0), 1)
    assert spearman_diff(real, flipped, ["x", "y", "k"]) == (pytest.approx(2.0), 1)
    # A constant synthetic column counts as correlation 0; a missing one as 1 + |ρ_real|.
    assert spearman_diff(real, real.assign(y=[1.0] * 4), ["x", "y"])[0] == pytest.approx(1.0)
    assert spearman_diff(real, real.drop(columns="y"), ["x", "y"])[0] == pytest.approx(2.0)


def test_pair_tvd_on_categories_and_real_deciles() -> None:
    kinds = [ColumnKind("a", "categorical"), ColumnKind("b", "categorical")]
    real = pd.DataFrame({"a": ["x", "y"] * 50, "b": ["x", "y"] * 50}, dtype=object)
    crossed = pd.DataFrame({"a": ["x", "y"] * 50, "b": ["y", "x"] * 50}, dtype=object)
    assert pair_tvd(real, real.copy(), kinds) == (pytest.approx(0.0), 1)
    assert pair_tvd(real, crossed, kinds) == (pytest.approx(1.0), 1)

    kinds = [NUM, CAT]
    real = pd.DataFrame({"n": np.arange(100.0), "c": ["x"] * 100})
    squeezed = pd.DataFrame({"n": np.zeros(100), "c": ["x"] * 100})
    # Real deciles put 10 % of the real rows in each bin; every synthetic row is in the first.
    assert pair_tvd(real, squeezed, kinds)[0] == pytest.approx(0.9)
    # Values beyond the real range fall in the end bins (the outside share measures them).
    # 0 stays in the first bin, the other 99 rows land in the last.
    stretched = real.assign(n=np.arange(100.0) * 1000)
    assert pair_tvd(real, stretched, kinds)[0] == pytest.approx(0.5 * (0.09 + 0.8 + 0.89))


def test_pair_tvd_groups_rare_categories_and_bins_missing_values() -> None:
    kinds = [ColumnKind("a", "categorical"), NUM]
    real = pd.DataFrame({"a": ["x"] * 199 + ["rare"], "n": [1.0, np.nan] * 100})
    # An unseen synthetic category lands with the real categories under 1 %.
    synth = pd.DataFrame({"a": ["x"] * 199 + ["other"], "n": [1.0, np.nan] * 100})
    assert pair_tvd(real, synth, kinds)[0] == pytest.approx(0.0)
    # The missing bin is its own: missing values moved to a value change the joint.
    filled = synth.assign(n=1.0)
    assert pair_tvd(real, filled, kinds)[0] == pytest.approx(0.5)


def test_fidelity_counts_a_missing_column_as_worst() -> None:
    kinds = [NUM, CAT, ColumnKind("m", "numeric")]
    real = pd.DataFrame(
        {"n": [1.0, 2.0, 3.0, 4.0], "c": ["a", "b", "a", "b"], "m": [1.0, 3.0, 2.0, 4.0]}
    )
    result = fidelity(real, real.drop(columns=["c"]), kinds)
    assert result.missing_columns == ["c"]
    assert result.category_tvd == {"c": 1.0}
    assert result.missing_gap == {"n": 0.0, "c": 1.0, "m": 0.0}
    assert result.ks == {"n": 0.0, "m": 0.0}
    assert result.outside_worst == ("n", 0.0)
    # Three pairs, two of them with the missing column.
    assert result.pairs == 3
    assert result.pair_tvd == pytest.approx(2 / 3)
    shifted = real.assign(m=[10.0, 20.0, 30.0, 40.0])
    result = fidelity(real, shifted, kinds)
    assert result.outside_worst == ("m", 1.0)
    assert result.ks_mean == pytest.approx(0.5)
    assert result.outside_mean == pytest.approx(0.5)


def test_canonical_reads_every_system_at_the_real_columns_resolution() -> None:
    kinds = [
        ColumnKind("d", "date", "%b-%Y"),
        ColumnKind("n", "numeric"),
        ColumnKind("c", "categorical"),
    ]
    raw = pd.DataFrame({"d": ["Mar-2018", None], "n": ["1.5", "x"], "c": [" a", None]})
    real = canonical(raw, kinds)
    march = (pd.Timestamp("2018-03-01") - pd.Timestamp("1970-01-01")).days
    assert real["d"].tolist()[0] == march and np.isnan(real["d"].tolist()[1])
    assert real["n"].tolist()[0] == 1.5 and np.isnan(real["n"].tolist()[1])
    assert real["c"].tolist()[0] == "a" and pd.isna(real["c"].tolist()[1])
    typed = pd.DataFrame(
        {
            "d": pd.to_datetime(["2018-03-17"]),
            "n": pd.array([2], dtype="Int64"),
            "c": pd.Categorical(["b"]),
        }
    )
    synth = canonical(typed, kinds)
    assert synth["d"].tolist() == [march]  # within the real column's month
    assert synth["n"].tolist() == [2.0]
    assert synth["c"].tolist() == ["b"]
    assert list(canonical(typed.drop(columns=["c"]), kinds).columns) == ["d", "n"]


def test_holdout_mask_is_a_fixed_fifth() -> None:
    mask = holdout_mask(1000)
    assert mask.sum() == 200
    assert (mask == holdout_mask(1000)).all()


def test_ml_efficacy_rewards_a_table_that_keeps_the_relation() -> None:
    pytest.importorskip("sklearn")
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 10, 2000)
    group = rng.choice(["lo", "hi"], 2000)
    y = 2 * x + np.where(group == "hi", 30.0, 0.0)
    kinds = [ColumnKind("x", "numeric"), ColumnKind("g", "categorical"), ColumnKind("y", "numeric")]
    real = pd.DataFrame({"x": x, "g": group, "y": y})
    baseline = ml_efficacy(real, None, kinds, "y")
    assert baseline is not None and baseline > 0.99
    kept = ml_efficacy(real, real.sample(frac=1.0, random_state=1), kinds, "y")
    assert kept is not None and kept > 0.99
    shuffled = real.assign(y=rng.permutation(y))
    broken = ml_efficacy(real, shuffled, kinds, "y")
    assert broken is not None and broken < 0.05
    assert ml_efficacy(real, real.drop(columns=["y"]), kinds, "y") is None


def _row(system: str, status: str = "ok", table: str = "t", **values: float | None) -> Row:
    metrics = {
        "outside_worst": values.get("outside", 0.0),
        "ks_mean": values.get("ks"),
        "pair_tvd": values.get("tvd"),
    }
    return Row(
        table,
        1.0,
        system,
        status,
        synth_s=values.get("s"),
        ml_r2=values.get("r2"),
        metrics=metrics,
        meta={"limit_s": 1800.0},
    )


def test_targets_compare_with_the_best_peer_and_each_peers_time() -> None:
    rows = [
        _row("rhosynth-mst", outside=0.005, ks=0.05, tvd=0.2, r2=0.3, s=10.0),
        _row("smartnoise-mst", ks=0.06, tvd=0.1, r2=0.4, s=150.0),
        _row("dpmm-mst", status="timeout"),
        _row("smartnoise-aim", ks=0.09, tvd=0.3, r2=0.1, s=50.0),
    ]
    [cells] = targets(rows)
    assert cells[2].endswith(": met")  # 0.5 % outside
    assert cells[3] == "0.050 vs 0.060: met"
    assert cells[4] == "0.200 vs 0.100: not met"
    assert cells[5] == "0.300 vs 0.400: not met"
    # 15× smartnoise; dpmm did not finish in 1800 s: more than 180×.
    assert cells[6].endswith(": met") and "> 180.0×" in cells[6]
    rows[1].synth_s = 90.0
    assert targets(rows)[0][6].endswith(": not met")


def test_targets_compare_with_the_peers_of_the_same_table_only() -> None:
    """A peer's run on another table is no yardstick (the targets once compared loans with the
    best KS of flights); a peer that failed on this table is left out of the speed comparison."""
    rows = [
        _row("rhosynth-mst", table="a", ks=0.05, tvd=0.2, r2=0.3, s=10.0),
        _row("smartnoise-mst", table="a", status="failed"),
        _row("dpmm-mst", table="a", ks=0.06, tvd=0.3, r2=0.2, s=200.0),
        _row("dpmm-mst", table="b", ks=0.01, tvd=0.1, r2=0.9, s=20.0),
    ]
    [cells] = targets(rows)
    assert cells[3] == "0.050 vs 0.060: met"
    assert cells[4] == "0.200 vs 0.300: met"
    assert cells[5] == "0.300 vs 0.200: met"
    assert "dpmm 20.0×" in cells[6] and cells[6].endswith(": met")


def test_update_replaces_only_its_section(tmp_path: Path) -> None:
    doc = tmp_path / "b.md"
    doc.write_text(f"# B\n\n{BEGIN}\nold\n{END}\n\n## Next\nkept\n")
    update(doc, f"{BEGIN}\nnew\n{END}\n")
    assert doc.read_text() == f"# B\n\n{BEGIN}\nnew\n{END}\n\n## Next\nkept\n"


def _fake_peer(tmp_path: Path, script: str) -> RunSettings:
    python = tmp_path / "peers" / "sn" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\n" + script)
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    (tmp_path / "out").mkdir()
    return RunSettings(
        data=tmp_path,
        out=tmp_path / "out",
        peers=tmp_path / "peers",
        seed=1,
        time_limit_s=1.0,
        rerun=False,
        cached_only=False,
    )


def test_a_run_past_the_time_limit_is_stopped_and_reported(tmp_path: Path) -> None:
    settings = _fake_peer(tmp_path, 'echo $$ > "$(dirname "$0")/pid"; exec sleep 60\n')
    kinds = tmp_path / "k.json"
    kinds.write_text("{}")
    started = time.monotonic()
    meta = run_system(SYSTEMS["smartnoise-mst"], "t", 1.0, kinds, settings)
    assert time.monotonic() - started < 30
    assert meta["status"] == "timeout" and meta["limit_s"] == 1.0
    pid = int((tmp_path / "peers" / "sn" / "bin" / "pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    # Cached: reused at the same or a shorter limit.
    assert (
        json.loads((tmp_path / "out" / "smartnoise-mst-t-eps1-seed1.json").read_text())["status"]
        == "timeout"
    )
    settings.time_limit_s = 0.5
    assert (
        run_system(SYSTEMS["smartnoise-mst"], "t", 1.0, kinds, settings)["wall_s"] == meta["wall_s"]
    )


def test_a_failing_run_is_reported_with_its_error(tmp_path: Path) -> None:
    settings = _fake_peer(tmp_path, "echo 'ValueError: bad dtype' >&2; exit 3\n")
    kinds = tmp_path / "k.json"
    kinds.write_text("{}")
    meta = run_system(SYSTEMS["smartnoise-aim"], "t", 0.3, kinds, settings)
    assert meta["status"] == "failed" and meta["returncode"] == 3
    assert "ValueError: bad dtype" in meta["error"]


def test_peer_variants_with_another_preprocessing_share() -> None:
    assert system("dpmm-mst") is SYSTEMS["dpmm-mst"]
    variant = system("dpmm-mst-pre0.5")
    assert (variant.family, variant.method, variant.share) == ("dpmm", "mst", 0.5)
    for bad in ("rhosynth-mst-pre0.5", "dpmm-mst-pre1.5", "dpmm-mst-prex", "cipher"):
        with pytest.raises(ValueError, match="unknown system"):
            system(bad)
