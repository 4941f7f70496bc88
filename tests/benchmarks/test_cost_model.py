"""benchmarks.cost_model helpers: the fit, the merge of saved runs and the section update (no
benchmark is run here)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from benchmarks.cost_model import (
    SECTION,
    CostRun,
    _features,
    _skip_status,
    current_section,
    fit,
    load_runs,
    predicted_seconds,
    quality_table_runs,
    replace_section,
    rho_of,
)
from engine.costs import RHO_REFERENCE
from engine.domain import Domain


def _domains() -> dict[str, Domain]:
    return {
        "small": Domain.from_mapping({"a": 2, "b": 3}),
        "mid": Domain.from_mapping({"a": 5, "b": 7, "c": 4}),
        "wide": Domain.from_mapping({f"c{i}": 6 for i in range(12)}),
        "one": Domain.from_mapping({"a": 3}),
    }


def test_fit_recovers_an_exact_model_with_factor_one() -> None:
    """Runs made to follow the model exactly: seconds = e^-9 · n^0.75 · d^1.5, memory = 2e8 +
    30·C (independent has no bound term) give back those coefficients and factors of 1."""
    domains = _domains()
    runs: list[CostRun] = []
    for name, rows in (("small", 1_000), ("mid", 50_000), ("wide", 200_000), ("one", 10)):
        run = CostRun(name, "independent", rows, len(domains[name]), "measured", rows_out=rows)
        cells = _features(run, domains).cells
        run.seconds = math.exp(-9) * rows**0.75 * len(domains[name]) ** 1.5
        run.peak_rss_bytes = round(2e8 + 30 * cells)
        runs.append(run)
    fitted = fit(runs, domains)["independent"]
    assert fitted["seconds_rows_exponent"] == 0.75
    assert fitted["seconds_columns_exponent"] == 1.5
    assert fitted["seconds_log_scale"] == -9.0
    assert fitted["seconds_factor"] == 1.0
    assert abs(fitted["memory_base_bytes"] - 2e8) < 1e3
    assert abs(fitted["memory_bytes_per_cell"] - 30) < 1e-2
    assert fitted["memory_factor"] == 1.0


def test_fit_recovers_the_rho_exponents_on_each_side() -> None:
    """Runs at ε = 0.1, 1 and 10 made to follow seconds = e^-8 · (n·d)^0.5 · (ρ/ρ₁)^c with
    c = 0.2 below ρ₁ and 0.6 above it give back those exponents and a factor of 1."""
    domains = _domains()
    runs: list[CostRun] = []
    for name, rows in (("small", 1_000), ("mid", 50_000), ("wide", 200_000)):
        for epsilon in (0.1, 1.0, 10.0):
            run = CostRun(
                name, "aim", rows, len(domains[name]), "measured", rows_out=rows, epsilon=epsilon
            )
            ratio = float(rho_of(epsilon) / RHO_REFERENCE)
            exponent = 0.2 if ratio < 1 else 0.6
            run.seconds = math.exp(-8) * _features(run, domains).cells ** 0.5 * ratio**exponent
            run.peak_rss_bytes = 10**8
            runs.append(run)
    fitted = fit(runs, domains)["aim"]
    assert fitted["seconds_rows_exponent"] == fitted["seconds_columns_exponent"] == 0.5
    assert fitted["seconds_rho_exponent_below"] == 0.2
    assert fitted["seconds_rho_exponent_above"] == 0.6
    assert fitted["seconds_log_scale"] == -8.0
    assert fitted["seconds_factor"] == 1.0


def test_fit_gives_aim_s_batches_their_own_terms_on_cpu_seconds() -> None:
    """The runs of the test above plus aim on two tables of more than 64 columns (batched),
    following that model times e^-0.5 · (ρ/ρ₁)^c_g with c_g = -0.15 below ρ₁ and 0.05 above it in
    CPU seconds (their wall seconds three times that): the method's terms come back unchanged
    and the batched ones from the CPU seconds, factor 1."""
    domains = _domains() | {
        "w80": Domain.from_mapping({f"c{i}": 4 for i in range(80)}),
        "w130": Domain.from_mapping({f"c{i}": 3 for i in range(130)}),
    }
    runs: list[CostRun] = []
    for name, rows in (
        ("small", 1_000),
        ("mid", 50_000),
        ("wide", 200_000),
        ("w80", 3_000),
        ("w130", 2_000),
    ):
        for epsilon in (0.1, 1.0, 10.0):
            run = CostRun(
                name, "aim", rows, len(domains[name]), "measured", rows_out=rows, epsilon=epsilon
            )
            features = _features(run, domains)
            ratio = float(rho_of(epsilon) / RHO_REFERENCE)
            exponent = 0.2 if ratio < 1 else 0.6
            seconds = math.exp(-8) * features.cells**0.5 * ratio**exponent * features.work_ratio
            if features.regime == "batched":
                run.cpu_seconds = (
                    seconds * math.exp(-0.5) * ratio ** ((-0.15 if ratio < 1 else 0.05) - exponent)
                )
                run.seconds = 3 * run.cpu_seconds
            else:
                run.seconds = seconds
            run.peak_rss_bytes = 10**8
            runs.append(run)
    assert sum(_features(r, domains).regime == "batched" for r in runs) == 6
    fitted = fit(runs, domains)["aim"]
    assert fitted["seconds_rows_exponent"] == fitted["seconds_columns_exponent"] == 0.5
    assert fitted["seconds_rho_exponent_below"] == 0.2
    assert fitted["seconds_rho_exponent_above"] == 0.6
    assert fitted["seconds_log_scale"] == -8.0
    assert fitted["batched_seconds_log_offset"] == -0.5
    assert fitted["batched_seconds_rho_exponent_below"] == -0.15
    assert fitted["batched_seconds_rho_exponent_above"] == 0.05
    assert fitted["seconds_factor"] == fitted["batched_seconds_factor"] == 1.0


def test_rho_of_epsilon_one_is_the_reference() -> None:
    assert rho_of(1.0) == RHO_REFERENCE
    assert rho_of(0.1) < RHO_REFERENCE < rho_of(10.0)


def test_skips_are_recorded_with_their_reason() -> None:
    skips = ["big:aim:146 s at ε = 1", "big:ppsyn"]
    assert _skip_status("big", "aim", skips) == "skipped (not run: 146 s at ε = 1)"
    assert _skip_status("big", "ppsyn", skips) == "skipped (not run: expected past the cap)"
    assert _skip_status("big", "mst", skips) is None
    assert _skip_status("small", "aim", skips) is None


def test_fit_states_the_worst_ratio_rounded_up() -> None:
    domains = _domains()
    runs = []
    sizes = (
        ("small", 1_000, 1.0),
        ("mid", 50_000, 2.0),
        ("wide", 9_000, 1.0),
        ("wide", 4_000, 2.0),
    )
    for name, rows, scale in sizes:
        run = CostRun(name, "independent", rows, len(domains[name]), "measured", rows_out=rows)
        run.seconds = scale * 1e-3
        run.peak_rss_bytes = 10**8
        runs.append(run)
    fitted = fit(runs, domains)["independent"]
    # Four runs on three tables (the 12-column one twice, twice the time with fewer rows): no
    # power law meets all four.
    assert fitted["seconds_factor"] > 1.0
    features = [_features(r, domains) for r in runs]
    predicted = predicted_seconds(fitted, features, runs)
    worst = max(max(p / r.seconds, r.seconds / p) for p, r in zip(predicted, runs, strict=True))  # type: ignore[operator]
    assert worst <= fitted["seconds_factor"] < worst + 0.01


def test_later_files_replace_earlier_runs(tmp_path: Path) -> None:
    first = {
        "command": "measure all",
        "date": "d1",
        "loadavg": "1",
        "runs": [
            {"dataset": "x", "method": "aim", "rows_in": 5, "columns": 2, "status": "skipped"},
            {"dataset": "x", "method": "mst", "rows_in": 5, "columns": 2, "status": "measured"},
        ],
    }
    # Saved before ε was recorded: ε = 1. A run at another ε is another run.
    other_epsilon = {"dataset": "x", "method": "aim", "rows_in": 5, "columns": 2}
    second = {
        "command": "measure aim",
        "date": "d2",
        "loadavg": "2",
        "runs": [
            {"dataset": "x", "method": "aim", "rows_in": 5, "columns": 2, "status": "measured"},
            other_epsilon | {"status": "measured", "epsilon": 10.0},
        ],
    }
    paths = [tmp_path / "a.json", tmp_path / "b.json"]
    for path, content in zip(paths, (first, second), strict=True):
        path.write_text(json.dumps(content))
    runs, command, date, _load = load_runs(paths)
    assert [(r.method, r.epsilon, r.status) for r in runs] == [
        ("aim", 1.0, "measured"),
        ("mst", 1.0, "measured"),
        ("aim", 10.0, "measured"),
    ]
    assert command == "measure all`, then `measure aim"
    assert date == "d1 and d2"


def test_replace_section_keeps_the_rest_of_the_file() -> None:
    document = "# B\n\n## One\n\ntext\n\n## Two\n\nmore\n"
    added = replace_section(document, f"{SECTION}\n\nfirst\n")
    assert added.startswith(document.rstrip("\n")) and added.endswith("first\n")
    middle = "# B\n\n" + f"{SECTION}\n\nold\n" + "\n## Two\n\nmore\n"
    replaced = replace_section(middle, f"{SECTION}\n\nnew\n")
    assert "old" not in replaced and "new" in replaced and replaced.endswith("## Two\n\nmore\n")


def test_quality_table_rows_are_read_with_their_medians() -> None:
    line = (
        "| adult | 48,842 × 14 | 0.1 | mst | 48,931 (48,745–49,770) | 0.031 | "
        "1.082 (1.062–1.200) | 1.97 | 188 | 214 (213–218) | 0.05 | 0.1 | 0.2 | 0.03 | 6.9× |"
    )
    (run,) = quality_table_runs("| header |\n" + line + "\n")
    assert run == {
        "dataset": "adult",
        "epsilon": 0.1,
        "method": "mst",
        "rows_out": 48_931,
        "seconds": 1.082,
        "peak_rss_bytes": 214 * 2**20,
    }


def test_the_section_survives_a_rewrite_of_the_rest() -> None:
    """benchmarks.run rewrites docs/benchmarks.md and carries the section over."""
    old = "# B\n\n## One\n\nold\n\n" + f"{SECTION}\n\ncosts\n"
    section = current_section(old)
    assert section == f"{SECTION}\n\ncosts\n"
    rewritten = replace_section("# B\n\n## One\n\nnew\n", section)
    assert rewritten == "# B\n\n## One\n\nnew\n\n" + f"{SECTION}\n\ncosts\n"
    assert replace_section("# B\n", current_section("# B\n")) == "# B\n"
