"""The local CLI writes the service's CSV: same quoting, same formula escaping, same bytes; and
its help names no path outside the repository."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from click.testing import CliRunner

from app.cli import main
from app.jobs.export import stream_csv
from engine.tables.encoding import TableSchema
from engine.tables.local import load_table, write_table


def _schema() -> TableSchema:
    return TableSchema.from_json(
        {
            "columns": [
                {
                    "name": "note",
                    "type": "categorical",
                    "categories": ["fine", "=cmd|' /C calc'!A0", "-x", 'say "hi"'],
                },
                {"name": "n", "type": "numeric", "integer": True, "min": 0, "max": 9, "bins": 3},
                {
                    "name": "when",
                    "type": "date",
                    "min": "2020-01-01",
                    "max": "2020-12-31",
                    "bins": 2,
                },
                {
                    "name": "mon",
                    "type": "date",
                    "format": "%b-%Y",
                    "min": "2020-01-01",
                    "max": "2020-12-31",
                    "bins": 2,
                    "nullable": True,
                },
            ]
        }
    )


def test_cli_csv_is_the_service_download_byte_for_byte(tmp_path: Path) -> None:
    schema = _schema()
    rng = np.random.default_rng(3)
    codes = np.stack([rng.integers(0, size, 400) for size in schema.domain().sizes], axis=1)
    frame = schema.decode(codes, rng)
    assert set(frame["note"].dropna()) == {"fine", "=cmd|' /C calc'!A0", "-x", 'say "hi"'}

    local = tmp_path / "local.csv"
    write_table(frame, local, schema)
    stored = tmp_path / "stored.parquet"
    pq.write_table(schema.to_arrow(frame), stored)
    served = b"".join(stream_csv(stored))
    assert local.read_bytes() == served

    text = served.decode()
    lines = text.splitlines()
    assert lines[0] == '"note","n","when","mon"'
    assert "\"'=cmd|' /C calc'!A0\"" in text and '"\'-x"' in text
    assert '"say ""hi"""' in text
    assert ',"=cmd' not in text and not any(line.startswith('"=') for line in lines)
    # Integers and ISO dates are written plain; text (and formatted dates) quoted.
    first = lines[1].split(",")
    assert first[1].isdigit() and first[2][:4] == "2020" and first[0].startswith('"')

    # The CLI reads its own (and the service's) CSV back as the values it was written from
    # (``mon`` aside: a "%b-%Y" month is written at month resolution, so a value drawn after a
    # mid-month bin edge can read back into the bin before it).
    read = load_table(local, schema)
    assert np.array_equal(read[:, :3], schema.encode(frame).codes[:, :3])


def test_evaluate_help_names_no_path_outside_the_repository() -> None:
    result = CliRunner().invoke(main, ["evaluate", "--help"])
    assert result.exit_code == 0
    assert "../shared" not in result.output
    assert "tests/fixtures/adult-domain.json" in result.output
