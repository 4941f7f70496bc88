"""Arrow/NumPy parsing of date and datetime columns gives exactly the pandas encoders' codes;
the whole-array fast paths of numbers and codes keep the old behaviour too."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from engine.columns.arrow_temporal import parse_text, template, templates_for
from engine.columns.arrow_text import strip
from engine.columns.temporal import _parse_text, _timestamps
from engine.tables.encoding import TableSchema, encode_array, encode_values

DATE_CELLS = [
    *("2013-02-28", "2013-02-29", "2012-02-29", "1900-02-29", "2000-02-29", "2013-02-30"),
    *("2013-13-01", "2013-00-10", "2013-01-00", "2013-01-32", "2013-1-05", "0001-01-01"),
    *("0000-01-01", "9999-12-31", "1969-12-31", "1583-10-15", "-013-01-01", "+013-01-01"),
    *(" 2013-01-05", "2013-01-05 ", "\t2013-01-05\n", "\u00a02013-01-05", "２０１３-01-01"),
    *("2013-01-05x", "2013-0a-01", "2013/01/05", "20130105", "2013-01", "2013", ""),
    *("2013-01-01T10:00:00Z", "2013-01-01T10:00:00", "2013-01-01 10:00:00", "2013-01-01t10:00"),
    *("2013-01-01T10:00:00+02:00", "2013-01-01T10:00:00-0530", "2013-01-01T24:00:00"),
    *("2013-01-01T23:59:60", "2013-01-01T10:60:00", "2013-01-01T10:00:00.5Z", "2013-01-01T10"),
    *("2013-01-01T10:00", "2013-01-01T10:00Z", "2013-01-01 10:00", "2013-01-01T1a:00:00"),
    *("2013-01-01z", "2013-01-01T10:00:00ZZ", "1969-12-31T23:59:59", "1960-06-15T12:30:45"),
    *("Mar-2018", "mar-2018", "MAR-2018", "Sept-2018", "Mar-18", "Xyz-2018", "May-0001"),
    *("03/04/2018", "3/4/2018", "31/12/2018", "12/31/2018", "29/02/2016", "29/02/2017"),
    *("05.01.2013 10:30", "5.1.2013 10:30", "05.01.2013  10:30", "05.01.2013\t10:30"),
    *("NA", "null", "-", "n/a", "garbage", "2018-03-04", "2018/03/04", "04032018"),
    *("100% 2018", "100% 18", "100%2018"),
]
FORMATS: list[str | None] = [
    None,
    "%Y-%m-%d",
    "%b-%Y",
    "%d/%m/%Y",
    "%m/%d/%Y",
    "%d.%m.%Y %H:%M",
    "%Y/%m/%d",
    "%Y-%m-%dT%H:%M:%SZ",
    "%d%m%Y",
    "%y-%m-%d",  # no template: every cell goes to pandas
    "%Y-%m-%d %I%p",
    "100%% %Y",
]


def _same(left: np.ndarray, right: np.ndarray) -> bool:
    return bool(np.all((left == right) | (np.isnat(left) & np.isnat(right))))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("kind", [pa.string(), pa.large_string()])
def test_parsed_instants_equal_pandas(fmt: str | None, kind: pa.DataType) -> None:
    cells = [*DATE_CELLS, None]
    asked: list[str] = []

    def fallback(texts: list[str]) -> np.ndarray:
        asked.extend(texts)
        return _parse_text(pd.Series(texts, dtype=object), fmt)

    parsed = parse_text(strip(pa.array(cells, type=kind)), fmt, fallback)
    expected = _timestamps(pd.Series(cells, dtype=object), fmt)
    assert _same(parsed, expected)
    assert (~np.isnat(expected)).any() or fmt in ("%y-%m-%d", "%Y-%m-%d %I%p", "100%% %Y")
    if templates_for(fmt):
        # Canonical cells never reach pandas; each other distinct text does, once.
        read = [c for c in cells if c is not None and c.strip() not in set(asked)]
        assert read and len(asked) == len(set(asked))


@pytest.mark.parametrize("fmt", FORMATS[:9])
def test_random_instants_in_canonical_form_parse_like_pandas(fmt: str | None) -> None:
    rng = np.random.default_rng(3)
    seconds = rng.integers(-62_135_596_800, 253_402_300_799, 3000)  # years 1 to 9999
    stamps = pd.Series(seconds.astype("datetime64[s]"))
    text = stamps.dt.strftime(fmt if fmt is not None else "%Y-%m-%dT%H:%M:%S")
    cells = [f"{t:>4}" if fmt == "%b-%Y" else t for t in text.tolist()]
    parsed = parse_text(
        pa.array(cells), fmt, lambda t: _parse_text(pd.Series(t, dtype=object), fmt)
    )
    assert _same(parsed, _timestamps(pd.Series(cells, dtype=object), fmt))


def test_templates_cover_only_the_directives_they_can_read() -> None:
    assert template("%d/%m/%Y") is not None
    assert template("%d.%m.%Y %H:%M") is not None
    for unreadable in ("%y-%m-%d", "%B %Y", "%I:%M %p", "%Y-%m-%dT%H:%M:%S%z", "%Y-%j", "%S.%f"):
        assert template(unreadable) is None, unreadable
    assert template("%Y-%m-%d\t%H") is None  # a tab is whitespace pandas reads loosely
    assert template("%m-%b") is None  # two months
    assert len(templates_for(None)) == 8


SCHEMAS: list[dict[str, Any]] = [
    {"name": "c", "type": "date", "min": "2012-01-01", "max": "2018-12-31", "unit": "day"},
    {
        "name": "c",
        "type": "date",
        "min": "2013-01-01",
        "max": "2013-12-31",
        "unit": "week",
        "nullable": True,
        "clip": True,
    },
    {
        "name": "c",
        "type": "datetime",
        "min": "2013-01-01T00:00:00",
        "max": "2013-01-02T00:00:00",
        "unit": "hour",
        "nullable": True,
    },
    {
        "name": "c",
        "type": "date",
        "format": "%d/%m/%Y",
        "min": "2016-01-01",
        "max": "2018-12-31",
        "unit": "month",
        "nullable": True,
    },
    {
        "name": "c",
        "type": "date",
        "format": "%b-%Y",
        "bins": ["0001-01-01", "2000-01-01", "2018-01-01", "2018-03-31", "9999-12-31"],
    },
]


@pytest.mark.parametrize("entry", SCHEMAS, ids=lambda e: f"{e['type']} {e.get('format')}")
@pytest.mark.parametrize("missing", [None, ["NA", "2018-03-04", " - "]])
def test_temporal_codes_equal_pandas_codes(entry: dict[str, Any], missing: Any) -> None:
    raw: dict[str, Any] = {"columns": [entry]}
    if missing is not None:
        raw["missing_values"] = missing
    schema = TableSchema.from_json(raw)
    column, spellings = schema.columns[0], schema.missing_values
    cells = [*DATE_CELLS, None]
    expected = encode_values(column, pd.Series(cells, dtype=object), spellings)
    assert encode_array(column, pa.array(cells), spellings).tolist() == expected.tolist()
    dictionary = pa.array(cells).dictionary_encode()
    assert encode_array(column, dictionary, spellings).tolist() == expected.tolist()
    assert (expected >= 0).any() and (expected < 0).any()


TYPED = [
    pa.array([0, 15_000, 17_000, -1, None, 2_932_896], type=pa.date32()),
    pa.array([0, 1_357_034_400, -86_401, None, 1_700_000_000], type=pa.timestamp("s")),
    pa.array([1_357_034_400_123, -1, None], type=pa.timestamp("ms", tz="UTC")),
    pa.array([1_357_034_400_123_456, -1, None], type=pa.timestamp("us", tz="Europe/Paris")),
    pa.array([1_357_034_400_123_456_789, -1, None], type=pa.timestamp("ns")),
]


@pytest.mark.parametrize("array", TYPED, ids=lambda a: str(a.type))
@pytest.mark.parametrize("kind", ["date", "datetime"])
def test_typed_dates_and_timestamps_equal_pandas_codes(array: pa.Array, kind: str) -> None:
    schema = TableSchema.from_json(
        {
            "columns": [
                {
                    "name": "c",
                    "type": kind,
                    "bins": ["1960-01-01", "1969-12-31", "1970-01-01", "2013-01-02", "9999-12-31"],
                    "nullable": True,
                }
            ]
        }
    )
    column = schema.columns[0]
    expected = encode_values(column, array.to_pandas(), schema.missing_values)
    assert encode_array(column, array, schema.missing_values).tolist() == expected.tolist()


NUMBER_SCHEMAS: list[dict[str, Any]] = [
    {"columns": [{"name": "c", "type": "numeric", "bins": [-5, 0, 10, 100], "nullable": True}]},
    {
        "columns": [{"name": "c", "type": "numeric", "bins": [0, 1, 100], "clip": True}],
        "missing_values": ["", "NA", "-1", "inf", "nan"],
    },
    {"columns": [{"name": "c", "type": "codes", "size": 300}]},
]
NUMBER_COLUMNS = [
    ["1", "", "2.5", "NA", "99", "", "-3", "1e2"],  # only missing spellings stop the cast
    ["1", "-1", "", "inf", "nan", "150", "-7", "0.5"],
    ["007", "+5", "-0", "299", "0", "12"],  # every cell a code: the integer cast
    ["0x10", "1", "2"],  # hexadecimal: Arrow reads it, pandas does not
    ["300", "1"],
    ["255", "256", "1"],
    ["1", " 2", "3"],
]


@pytest.mark.parametrize("raw", NUMBER_SCHEMAS, ids=lambda r: str(r["columns"][0]["type"]))
@pytest.mark.parametrize("cells", NUMBER_COLUMNS, ids=str)
def test_whole_array_number_paths_equal_pandas_codes(raw: dict[str, Any], cells: list[str]) -> None:
    schema = TableSchema.from_json(raw)
    column, missing = schema.columns[0], schema.missing_values
    expected = encode_values(column, pd.Series(cells, dtype=object), missing)
    codes = encode_array(column, pa.array(cells), missing)
    assert codes.tolist() == expected.tolist()
    if (expected >= 0).all():
        # Valid codes: the column packs them as the narrowest type when there is no refusal.
        packed, problems = schema.encode_columns(pa.table({"c": pa.array(cells)}))
        assert not problems and packed[0].tolist() == expected.tolist()
        assert packed[0].dtype == (np.uint16 if column.size > 256 else np.uint8)
