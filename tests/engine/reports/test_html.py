"""render_html (engine/reports/html.py): one self-contained page, escaped labels, a plot per figure."""

from __future__ import annotations

from fractions import Fraction
from html.parser import HTMLParser

import numpy as np
import pytest

from engine.columns.categorical import BooleanColumn, CategoricalColumn
from engine.columns.numeric import NumericColumn
from engine.release.record import MeasuredMarginal, ReleaseRecord
from engine.reports import build_owner_report, build_release_report, render_html
from engine.tables.encoding import TableSchema

HOSTILE = "<script>alert(1)</script>"
SCHEMA = TableSchema(
    (
        CategoricalColumn("kind", ("plain", HOSTILE), other="$x$ & more"),
        NumericColumn("size", (0.0, 1.0, 2.0, 4.0), nullable=True),
        BooleanColumn("flag"),
    )
)


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.references: list[str] = []
        self.images: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        for name, value in attrs:
            if name in ("src", "href", "srcset", "action", "data", "poster") and value is not None:
                self.references.append(value)
                if tag == "img" and name == "src":
                    self.images.append(value)

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _parse(page: str) -> _Page:
    parser = _Page()
    parser.feed(page)
    parser.close()
    return parser


def _tables() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(4)
    real = np.column_stack([rng.integers(0, s, 300) for s in SCHEMA.domain().sizes])
    synth = np.column_stack([rng.integers(0, s, 250) for s in SCHEMA.domain().sizes])
    return real.astype(np.int64), synth.astype(np.int64)


def _release_report() -> dict[str, object]:
    _, synth = _tables()
    marginal = MeasuredMarginal(("kind",), np.array([90, 80, 81]), Fraction(2), Fraction(1, 4))
    record = ReleaseRecord(
        "test", {"note": HOSTILE}, Fraction(1, 4), SCHEMA.domain(), 250.0, (marginal,)
    )
    return build_release_report(SCHEMA, record, synth)


def _owner_report() -> dict[str, object]:
    real, synth = _tables()
    return build_owner_report(SCHEMA, real, synth, rng=np.random.default_rng(0))


@pytest.mark.parametrize("which", ["release", "owner"])
def test_the_page_is_self_contained_and_escapes_labels(which: str) -> None:
    report = _release_report() if which == "release" else _owner_report()
    page = render_html(report, title=f"{HOSTILE} report")
    parsed = _parse(page)
    assert "script" not in parsed.tags
    assert "http:" not in page and "https:" not in page
    for reference in parsed.references:
        assert reference.startswith("data:image/png;base64,"), reference[:40]
    assert HOSTILE not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert HOSTILE in "".join(parsed.text)  # shown to the reader as text
    assert parsed.tags.count("h2") >= 4
    assert report["tier"] in "".join(parsed.text)


def test_release_page_has_a_plot_per_distribution_and_the_mi_heatmap() -> None:
    report = _release_report()
    parsed = _parse(render_html(report, title="release"))
    assert len(parsed.images) == len(report["distributions"]) + 1  # type: ignore[arg-type]
    text = "".join(parsed.text)
    assert report["explanations"]["expected_noise_tvd"] in text  # type: ignore[index]


def test_owner_page_has_overlays_heatmaps_and_the_dcr_histogram() -> None:
    report = _owner_report()
    parsed = _parse(render_html(report, title="owner"))
    # One overlay per column, Pearson, Spearman, Cramér's V, the DCR histogram.
    assert len(parsed.images) == len(report["distributions"]) + 4  # type: ignore[arg-type]
    text = "".join(parsed.text)
    assert "not a privacy guarantee" in text
    assert "Worst pairs" in text


def test_an_unknown_tier_is_refused() -> None:
    with pytest.raises(ValueError, match="tier"):
        render_html({"tier": "analyst"}, title="x")
