"""Labels of every column type and the noisy-measurement tables built from a release record."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from engine.columns.labels import MISSING_LABEL, code_labels
from engine.release.record import Charge, MeasuredMarginal, RecordError, ReleaseRecord
from engine.release.tables import MAX_GROUP_LABELS, measurements_arrow, measurements_json
from engine.tables.encoding import TableSchema

SCHEMA = TableSchema.from_json(
    {
        "columns": [
            {
                "name": "city",
                "type": "categorical",
                "categories": ["Lyon", "Paris"],
                "other": "elsewhere",
                "nullable": True,
            },
            {"name": "age", "type": "numeric", "bins": [0, 18, 65, 100]},
            {"name": "member", "type": "boolean"},
            {"name": "day", "type": "date", "bins": ["2024-01-01", "2024-01-31", "2024-03-01"]},
            {"name": "code", "type": "codes", "size": 7},
        ]
    }
)


def test_labels_of_every_column_type() -> None:
    assert code_labels(SCHEMA.column("city")) == ("Lyon", "Paris", "elsewhere", MISSING_LABEL)
    assert code_labels(SCHEMA.column("age")) == ("[0, 18)", "[18, 65)", "[65, 100]")
    assert code_labels(SCHEMA.column("member")) == ("false", "true")
    day = code_labels(SCHEMA.column("day"))
    assert len(day) == SCHEMA.column("day").size and day[0].startswith("[2024-01-01")
    assert code_labels(SCHEMA.column("code")) == tuple(str(i) for i in range(7))
    for column in SCHEMA.columns:
        assert len(code_labels(column)) == column.size


def _record() -> ReleaseRecord:
    domain = SCHEMA.domain()
    one_way = MeasuredMarginal(("city",), np.array([5, -2, 7, 1]), Fraction(2), Fraction(1, 4))
    # A compressed code axis: codes 0-4 keep their own cell, 5 and 6 share cell 5.
    merged = np.array([0, 1, 2, 3, 4, 5, 5])
    two_way = MeasuredMarginal(
        ("age", "code"),
        np.arange(18, dtype=np.int64).reshape(3, 6),
        Fraction(4),
        Fraction(1, 8),
        axis_maps=(None, merged),
    )
    selection = Charge("selection", "pick a pair", Fraction(1, 8), 1.0, epsilon=1.0)
    return ReleaseRecord(
        method="mst",
        params={"compress": True},
        rho=Fraction(1, 2),
        domain=domain,
        estimated_total=12.5,
        marginals=(one_way, two_way),
        charges=(selection,),
    )


def test_record_round_trips_and_checks_the_charge() -> None:
    record = _record()
    loaded = ReleaseRecord.from_bytes(record.to_bytes())
    assert loaded.rho == record.rho and loaded.params == record.params
    for a, b in zip(loaded.marginals, record.marginals, strict=True):
        assert a.attributes == b.attributes and a.sigma2 == b.sigma2 and a.rho == b.rho
        assert np.array_equal(a.noisy_counts, b.noisy_counts)
        for x, y in zip(a.axis_maps, b.axis_maps, strict=True):
            assert (x is None and y is None) or np.array_equal(x, y)  # type: ignore[arg-type]
    assert loaded.charges == record.charges
    with pytest.raises(RecordError, match="add up"):
        ReleaseRecord("mst", {}, Fraction(1), SCHEMA.domain(), 1.0, record.marginals)
    with pytest.raises(RecordError):
        ReleaseRecord.from_bytes(b"not an archive")


def test_measurement_tables_label_every_cell() -> None:
    record = _record()
    body = measurements_json(record, SCHEMA)
    first, second = body["measurements"]
    assert first["labels"] == [["Lyon", "Paris", "elsewhere", MISSING_LABEL]]
    assert first["noisy_counts"] == [5, -2, 7, 1] and first["sigma"] == pytest.approx(2**0.5)
    assert second["compressed"] is True
    assert second["labels"][1][5] == "5 | 6"
    assert body["other_releases"][0]["kind"] == "selection"
    table = measurements_arrow(record, SCHEMA)
    assert table.num_rows == 4 + 18
    assert table.column("noisy_count").to_pylist() == [5, -2, 7, 1, *range(18)]
    assert table.column("cell").to_pylist()[4] == ["[0, 18)", "0"]
    assert table.column("cell").to_pylist()[-1] == ["[65, 100]", "5 | 6"]


def test_a_large_merged_cell_names_a_few_values_and_counts_the_rest() -> None:
    domain_size = SCHEMA.column("code").size
    merged = np.zeros(domain_size, dtype=np.int64)
    marginal = MeasuredMarginal(("code",), np.array([3]), Fraction(1), Fraction(1, 2), (merged,))
    record = ReleaseRecord("mst", {}, Fraction(1, 2), SCHEMA.domain(), 3.0, (marginal,))
    label = measurements_json(record, SCHEMA)["measurements"][0]["labels"][0][0]
    assert label.count("|") == MAX_GROUP_LABELS
    assert label.endswith(f"({domain_size - MAX_GROUP_LABELS} more)")
