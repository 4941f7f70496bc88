"""One self-contained HTML page for a report of either tier.

The page is built from the report dict alone (the JSON and the HTML carry the same numbers and
cannot drift): inline CSS, plots as inline PNG data URIs (:mod:`engine.reports.plots`), no
script, no external URL, readable offline. Every string taken from the report (column names,
labels, method parameters, explanations) goes through :func:`html.escape`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

import numpy as np

from engine.reports.plots import bar_plot, heatmap_plot, histogram_plot

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:2rem auto;max-width:70rem;
padding:0 1rem;color:#1d1d1f;line-height:1.45}
h1{font-size:1.6rem}h2{font-size:1.25rem;margin-top:2.2rem;border-bottom:1px solid #ccc}
h3{font-size:1.05rem}
table{border-collapse:collapse;margin:.6rem 0;font-size:.9rem}
th,td{border:1px solid #ccc;padding:.25rem .5rem;text-align:left;vertical-align:top}
th{background:#f2f2f2}td.num{text-align:right;font-variant-numeric:tabular-nums}
.explain{color:#444;font-size:.9rem;margin:.3rem 0 .6rem}
.note{background:#fff8e1;border-left:4px solid #f0b400;padding:.5rem .8rem;margin:.5rem 0}
.tier{display:inline-block;padding:.1rem .5rem;border-radius:.3rem;background:#e3ecff}
.verdict{padding:.7rem 1rem;margin:.6rem 0;border-left:6px solid #888;background:#f4f4f4;
font-size:1.05rem}.verdict.values_off{border-color:#c62828;background:#fdecea}
.verdict.values_close{border-color:#2e7d32;background:#edf7ed}
.verdict.bins_only{border-color:#f0b400;background:#fff8e1}
tr.flagged td{background:#fdecea}
.plots{display:flex;flex-wrap:wrap;gap:1rem}.plots figure{margin:0}
img{max-width:100%;height:auto}figcaption{font-size:.85rem;color:#444}
"""


def _number(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.4g}"
    return escape(str(value))


def _explain(report: Mapping[str, Any], key: str, label: str | None = None) -> str:
    """The report's one-line explanation of ``key``, prefixed with ``label`` when it explains a
    column of the table that follows."""
    text = report.get("explanations", {}).get(key)
    if not text:
        return ""
    prefix = f"<b>{escape(label)}</b>: " if label else ""
    return f'<p class="explain">{prefix}{escape(text)}</p>'


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = []
        for cell in row:
            if isinstance(cell, int | float) or cell is None:
                cells.append(f'<td class="num">{_number(cell)}</td>')
            else:
                cells.append(f"<td>{escape(str(cell))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _figure(source: str, caption: str) -> str:
    return (
        f'<figure><img src="{escape(source)}" alt="{escape(caption)}">'
        f"<figcaption>{escape(caption)}</figcaption></figure>"
    )


def _numbers_table(
    name: str, headers: Sequence[str], labels: Sequence[str], columns: Sequence[Sequence[Any]]
) -> str:
    rows = [[label, *values] for label, *values in zip(labels, *columns, strict=True)]
    return f"<details><summary>{escape(name)}: numbers</summary>{_table(headers, rows)}</details>"


def _columns(names: Sequence[str]) -> str:
    return " × ".join(names)


# --------------------------------------------------------------------------------------------
# Release tier
# --------------------------------------------------------------------------------------------


def _unit_rows(report: Mapping[str, Any]) -> list[list[Any]]:
    """The privacy unit's rows of a summary table (none for a row-level dataset)."""
    unit = report.get("privacy_unit")
    if not unit:
        return []
    rows: list[list[Any]] = [["privacy unit", unit["guarantee"]]]
    for section, labels in (("truncation", _DP_LABELS), ("truncation_exact", _EXACT_LABELS)):
        figures = unit.get(section) or {}
        rows += [[label, figures[key]] for key, label in labels if key in figures]
    return rows


_DP_LABELS = (
    ("units_truncated", "people with rows removed by truncation (DP count)"),
    ("rows_removed_at_least", "rows removed by truncation, at least (DP count)"),
    ("sigma", "σ of each truncation count"),
)
_EXACT_LABELS = (
    ("rows_removed", "rows removed by truncation (exact, owner only)"),
    ("units_truncated", "people with rows removed by truncation (exact, owner only)"),
    ("units", "people (exact, owner only)"),
    ("rows_without_unit", "rows without a unit, dropped (exact, owner only)"),
)


def _release(report: Mapping[str, Any]) -> list[str]:
    out = ["<h2>Privacy</h2>", _explain(report, "rho")]
    params = [[key, json.dumps(value)] for key, value in sorted(report["params"].items())]
    out.append(
        _table(
            ["", ""],
            [
                ["method", report["method"]],
                ["ρ (zCDP)", report["rho"]["value"]],
                *_unit_rows(report),
                ["noisy row count N̂", report["estimated_total"]],
                ["synthetic rows", report["synthetic_rows"]],
            ],
        )
    )
    if params:
        out += ["<h3>Parameters</h3>", _table(["parameter", "value"], params)]
    unit = report.get("privacy_unit")
    per = f", {escape(unit['guarantee'])}" if unit else ""
    out += [f"<h3>(ε, δ) privacy profile{per}</h3>", _explain(report, "privacy_profile")]
    out.append(
        _table(
            ["δ (total)", "conversion δ", "discovery δ", "ε"],
            [
                [
                    p["delta"],
                    p.get("conversion_delta", p["delta"]),
                    p.get("discovery_delta", 0),
                    p["epsilon"],
                ]
                for p in report["privacy_profile"]
            ],
        )
    )
    rules = report.get("rules")
    if rules:
        out += ["<h2>Rules kept</h2>", _explain(report, "rules")]
        out.append(
            _table(
                [
                    "rule",
                    "broke it as drawn",
                    "values drawn again in their bins",
                    "rows redrawn from the model",
                    "repaired",
                    "still breaking",
                ],
                [
                    [
                        r["rule"],
                        r["violating_before"],
                        r.get("resampled_in_bins", 0),
                        r["redrawn"],
                        r["repaired"],
                        r["remaining"],
                    ]
                    for r in rules["rules"]
                ],
            )
        )
        out.append(
            f'<p class="note">{escape(str(rules["rows"]))} rows; '
            f"{escape(str(rules['violating_rows_before']))} broke a rule as drawn; redraw: "
            f"{escape(str(rules['redraw']))}, {escape(str(rules['redraw_rounds']))} rounds, "
            f"{escape(str(rules['drawn_rows']))} rows drawn.</p>"
        )
    out += [
        "<h2>Measurements</h2>",
        _explain(report, "sigma", "σ"),
        _explain(report, "rho_share", "share of ρ"),
        _explain(report, "expected_noise_tvd", "expected noise TVD"),
        _explain(report, "model_residual_tvd", "residual TVD"),
    ]
    out.append(
        _table(
            ["columns", "cells", "σ", "share of ρ", "expected noise TVD", "residual TVD"],
            [
                [
                    _columns(m["attributes"]) + (" (compressed)" if m["compressed"] else ""),
                    m["cells"],
                    m["sigma"],
                    m["rho_share"],
                    m["expected_noise_tvd"],
                    m["model_residual_tvd"],
                ]
                for m in report["measurements"]
            ],
        )
    )
    if report["charges"]:
        out += ["<h3>Other releases (selections and noisy scores)</h3>"]
        out.append(
            _table(
                ["kind", "description", "share of ρ", "ε", "σ"],
                [
                    [c["kind"], c["description"], c["rho_share"], c.get("epsilon"), c.get("sigma")]
                    for c in report["charges"]
                ],
            )
        )
    out += [
        "<h2>Column distributions</h2>",
        _explain(report, "distribution"),
        '<div class="plots">',
    ]
    for item in report["distributions"]:
        series: list[tuple[str, Sequence[float | None], Sequence[float | None] | None]] = [
            ("synthetic", item["synthetic"], None)
        ]
        if item["noisy"] is not None:
            series.append(("noisy measurement ±2σ/N̂", item["noisy"], item["error"]))
        caption = f"{item['column']}: synthetic share" + (
            " vs noisy measured share" if item["noisy"] is not None else " (no one-way measurement)"
        )
        out.append(_figure(bar_plot(item["labels"], series, item["column"]), caption))
        headers = ["category or bin", "synthetic share"]
        columns = [item["synthetic"]]
        if item["noisy"] is not None:
            headers += ["noisy share", "± 2σ/N̂"]
            columns += [item["noisy"], item["error"]]
        out.append(_numbers_table(item["column"], headers, item["labels"], columns))
    out.append("</div>")
    cap = report["caps"]["distribution_columns"]
    if cap["shown"] < cap["total"]:
        out.append(f"<p>Shown: the first {cap['shown']} of {cap['total']} columns.</p>")
    pairs = report["pairs"]
    out += ["<h2>Pairwise structure</h2>", _explain(report, "connected")]
    out.append(_explain(report, "mutual_information"))
    out.append(f"<p>Dependence measured on: {escape(pairs['source'])}.</p>")
    columns = pairs["matrix"]["columns"]
    if len(columns) >= 2:
        image = heatmap_plot(
            columns,
            [("normalised mutual information", pairs["matrix"]["normalised_mi"])],
            low=0.0,
            high=1.0,
        )
        out.append(_figure(image, "normalised mutual information between columns"))
    out.append(
        _table(
            ["columns", "MI (bits)", "normalised MI", "connected"],
            [
                [
                    _columns(p["columns"]),
                    p["mi_bits"],
                    p["normalised_mi"],
                    "yes" if p["connected"] else "no",
                ]
                for p in pairs["top_pairs"]
            ],
        )
    )
    connected = ", ".join(_columns(p) for p in pairs["connected_pairs"]) or "none"
    out.append(f"<p>Connected pairs: {escape(connected)}</p>")
    return out


# --------------------------------------------------------------------------------------------
# Owner tier
# --------------------------------------------------------------------------------------------


def _correlation_block(
    report: Mapping[str, Any], key: str, title: str, names: list[str]
) -> list[str]:
    block = report["correlations"][key]
    if len(names) < 2:
        return []
    low = 0.0 if key == "cramers_v" else -1.0
    image = heatmap_plot(
        names,
        [
            ("real", block["real"]),
            ("synthetic", block["synthetic"]),
            ("synthetic − real", block["difference"]),
        ],
        low=low,
        high=1.0,
        diverging=[key != "cramers_v", key != "cramers_v", True],
    )
    return [
        f"<h3>{escape(title)}</h3>",
        _explain(report, key),
        _figure(image, f"{title}: real, synthetic, difference"),
    ]


def _counted_rows(rows: Mapping[str, Any]) -> list[list[Any]]:
    """Rows counted for marginals when a table was sampled (reports from before the cap lack
    the fields)."""
    out: list[list[Any]] = []
    for side in ("real", "synthetic"):
        counted = rows.get(f"{side}_counted", rows[side])
        if counted != rows[side]:
            out.append([f"{side} rows counted (uniform sample)", counted])
    return out


_EPOCH_UNITS = ("days since 1970-01-01", "seconds since 1970-01-01 UTC")


def _in_unit(value: Any, unit: str) -> str:
    """A value in a column's unit: dates and datetimes as ISO 8601, numbers with up to 8
    significant digits."""
    if value is None:
        return "–"
    if unit in _EPOCH_UNITS:
        try:
            whole = round(float(value))
            if unit == _EPOCH_UNITS[0]:
                return str(np.datetime64(whole, "D"))
            return str(np.datetime64(whole, "s"))
        except (OverflowError, ValueError):
            return f"{value:.8g}"
    return f"{value:.8g}"


def _share(value: Any) -> str:
    return "–" if value is None else f"{100 * value:.3g} %"


def _verdict(report: Mapping[str, Any]) -> list[str]:
    verdict = report.get("verdict")
    if not verdict:
        return []  # a report from before verdicts
    status = escape(str(verdict.get("status", "")))
    return [
        "<h2>Verdict</h2>",
        f'<p class="verdict {status}">{escape(verdict["headline"])}</p>',
        _explain(report, "verdict"),
    ]


def _values(report: Mapping[str, Any]) -> list[str]:
    values = report.get("values")
    if not values:
        return []
    out = ["<h2>Values</h2>"]
    if not values.get("available"):
        out.append(f'<p class="note">{escape(values.get("reason", ""))}</p>')
        return out
    columns = values.get("columns", [])
    if not columns:
        out.append("<p>No numeric, date or datetime column.</p>")
        return out
    out.append(_explain(report, "values"))
    rows = []
    for c in columns:
        unit = c["unit"]
        real, synthetic = c["real"], c["synthetic"]
        cells = [
            c["column"] + (" ⚠" if c["flagged"] else ""),
            f"{_in_unit(real['min'], unit)} … {_in_unit(real['max'], unit)}",
            f"{_in_unit(synthetic['min'], unit)} … {_in_unit(synthetic['max'], unit)}",
            f"{_share(c['outside_share'])} ({_share(c['below_share'])} below, "
            f"{_share(c['above_share'])} above)",
            c["ks"],
            c["mean_error"],
            c["median_error"],
            c["std_error"],
            c["max_quantile_error"],
            c["missing_rate_gap"],
        ]
        body = "".join(
            f'<td class="num">{_number(cell)}</td>'
            if isinstance(cell, int | float) or cell is None
            else f"<td>{escape(str(cell))}</td>"
            for cell in cells
        )
        rows.append(f'<tr class="{"flagged" if c["flagged"] else ""}">{body}</tr>')
    headers = [
        "column",
        "real range",
        "synthetic range",
        "synthetic outside the real range",
        "KS",
        "mean error",
        "median error",
        "std error",
        "largest quantile error",
        "missing-rate gap",
    ]
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>")
    thresholds = values.get("thresholds", {})
    out.append(
        "<p>⚠ flags a column with more than "
        f"{_share(thresholds.get('outside_share'))} of its synthetic values outside the real "
        f"range, a KS statistic above {_number(thresholds.get('ks'))} (or above the sampling "
        f"bound at α = {_number(thresholds.get('ks_alpha'))} for small tables), or a missing-rate "
        f"gap above {_number(thresholds.get('missing_rate_gap'))}. Errors are divided by the "
        f"{escape(str(values.get('scale', 'real standard deviation')))}.</p>"
    )
    out += [
        _explain(report, "outside_share", "outside the real range"),
        _explain(report, "ks", "KS"),
        _explain(report, "value_errors", "errors"),
        _explain(report, "missing_rate_gap", "missing-rate gap"),
    ]
    for c in columns:
        if "quantiles" not in c["real"] or "quantiles" not in c["synthetic"]:
            continue
        unit = c["unit"]
        labels = [f"{p} %" for p in c["real"]["quantiles"]] + ["mean", "standard deviation"]
        real = [*c["real"]["quantiles"].values(), c["real"]["mean"], c["real"]["std"]]
        synthetic = [
            *c["synthetic"]["quantiles"].values(),
            c["synthetic"]["mean"],
            c["synthetic"]["std"],
        ]
        errors = [*c["quantile_errors"].values(), c["mean_error"], c["std_error"]]
        spread = (
            f" (standard deviation in {unit.split(' since')[0]})" if unit in _EPOCH_UNITS else ""
        )
        out.append(
            _numbers_table(
                f"{c['column']}: quantiles, mean and standard deviation{spread}",
                ["", "real", "synthetic", "error (in real standard deviations)"],
                labels,
                [
                    [_in_unit(v, unit) for v in real[:-1]] + [f"{real[-1]:.6g}"],
                    [_in_unit(v, unit) for v in synthetic[:-1]] + [f"{synthetic[-1]:.6g}"],
                    errors,
                ],
            )
        )
    return out


def _owner(report: Mapping[str, Any]) -> list[str]:
    marginals = report["marginals"]
    out = [*_verdict(report), *_values(report), "<h2>Summary</h2>"]
    status = report.get("verdict", {}).get("status")
    score_label = f"k-marginal score (k = {marginals['score_k']}; bins, not values)"
    out.append(
        _table(
            ["", ""],
            [
                ["real rows", report["rows"]["real"]],
                ["synthetic rows", report["rows"]["synthetic"]],
                *_unit_rows(report),
                *_counted_rows(report["rows"]),
                [score_label, marginals["k_marginal_score"]],
                *[[f"mean {k}-way TVD", v] for k, v in marginals["mean_tvd"].items()],
            ],
        )
    )
    if status in ("values_off", "bins_only"):
        out.append(
            '<p class="note">The k-marginal score compares bin codes: a value far outside the '
            "real range, or anywhere inside a wide bin, scores as well as a faithful one. "
            "It is not the verdict (above).</p>"
        )
    out += [_explain(report, "k_marginal_score"), _explain(report, "mean_tvd")]
    out.append(
        _table(
            ["k", "column sets", "averaged over"],
            [[k, v["total"], v["shown"]] for k, v in marginals["subsets"].items()],
        )
    )
    out += [
        "<h2>Column distributions</h2>",
        _explain(report, "distribution"),
        '<div class="plots">',
    ]
    for item in report["distributions"]:
        image = bar_plot(
            item["labels"],
            [("real", item["real"], None), ("synthetic", item["synthetic"], None)],
            item["column"],
        )
        out.append(_figure(image, f"{item['column']}: TVD {_number(item['tvd'])}"))
        out.append(
            _numbers_table(
                item["column"],
                ["category or bin", "real share", "synthetic share"],
                item["labels"],
                [item["real"], item["synthetic"]],
            )
        )
    out.append("</div>")
    correlations = report["correlations"]
    out.append("<h2>Correlations</h2>")
    sources = ", ".join(f"{n}: {s}" for n, s in correlations["source"].items()) or "none"
    out.append(f"<p>Ordered columns (Pearson/Spearman computed on): {escape(sources)}.</p>")
    out += _correlation_block(report, "pearson", "Pearson", correlations["ordered_columns"])
    out += _correlation_block(report, "spearman", "Spearman", correlations["ordered_columns"])
    out += _correlation_block(report, "cramers_v", "Cramér's V", correlations["columns"])
    out += ["<h2>Worst pairs</h2>", _explain(report, "worst_pairs")]
    out.append(
        _table(
            ["columns", "2-way TVD", "synthetic rows with an unseen pair"],
            [
                [_columns(p["columns"]), p["tvd"], p["novel_share"]]
                for p in report["worst_pairs"]["pairs"]
            ],
        )
    )
    if report["missing"]:
        out += ["<h2>Missing values</h2>", _explain(report, "missing")]
        out.append(
            _table(
                ["column", "real", "synthetic"],
                [[m["column"], m["real"], m["synthetic"]] for m in report["missing"]],
            )
        )
    out += ["<h2>Novel combinations</h2>", _explain(report, "novel_combinations")]
    out.append(
        _table(
            ["share of synthetic rows absent from the real table"],
            [[report["novel_combinations"]["share"]]],
        )
    )
    out += ["<h2>Exact matches and distance to the closest record</h2>"]
    disclosure = report["disclosure"]
    if not disclosure["available"]:
        out.append(f"<p>{escape(disclosure['reason'])}</p>")
        return out
    out += [_explain(report, "exact_match")]
    matches = disclosure["exact_match"]
    out.append(
        _table(
            ["comparison", "share identical"],
            [
                ["synthetic rows → any real row", matches["synthetic_to_real"]],
                ["synthetic rows → real half A", matches["synthetic_to_a"]],
                ["held-out real half B → real half A (baseline)", matches["holdout_b_to_a"]],
            ],
        )
    )
    dcr = disclosure["dcr"]
    out.append(_explain(report, "dcr"))
    out.append(
        _table(
            ["comparison", "median DCR", "5th percentile", "share at 0"],
            [
                [
                    "synthetic → A",
                    dcr["synthetic_to_a"]["median"],
                    dcr["synthetic_to_a"]["p5"],
                    dcr["synthetic_to_a"]["zero_share"],
                ],
                [
                    "holdout B → A",
                    dcr["holdout_b_to_a"]["median"],
                    dcr["holdout_b_to_a"]["p5"],
                    dcr["holdout_b_to_a"]["zero_share"],
                ],
            ],
        )
    )
    image = histogram_plot(
        dcr["bin_edges"],
        [
            ("synthetic → A", dcr["synthetic_to_a"]["histogram"]),
            ("holdout B → A", dcr["holdout_b_to_a"]["histogram"]),
        ],
        xlabel="distance to the closest record (share of columns that differ)",
    )
    out.append(_figure(image, "distance to the closest record"))
    return out


def render_html(report: Mapping[str, Any], *, title: str) -> str:
    """One self-contained HTML page (inline CSS and PNG plots, no script, no URL) for a report
    from :func:`build_release_report` or :func:`build_owner_report`."""
    tier = report.get("tier")
    if tier == "release":
        body = _release(report)
    elif tier == "owner":
        body = _owner(report)
    else:
        raise ValueError("the report's tier must be 'release' or 'owner'")
    notes = "".join(f'<p class="note">{escape(note)}</p>' for note in report.get("notes", []))
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>"
        f'<h1>{escape(title)}</h1><p><span class="tier">{escape(tier)} tier</span></p>{notes}'
        + "\n".join(part for part in body if part)
        + "</body></html>\n"
    )
