"""Codes as Parquet in the stored layout, for the engines that count from files.

The service stores an upload's codes as Parquet with one non-nullable column per attribute in
the narrowest unsigned type of its size (``app/datasets/ingest.py`` ``encoded_arrow_schema``);
:func:`write_codes` writes a :class:`~engine.domain.Dataset` the same way (tests, benchmarks).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from engine.domain import Dataset, narrowest_unsigned


def codes_schema(data: Dataset) -> pa.Schema:
    """The stored layout's Arrow schema for ``data``'s domain."""
    return pa.schema(
        [
            pa.field(attr, pa.from_numpy_dtype(narrowest_unsigned(size)), nullable=False)
            for attr, size in zip(data.domain.attributes, data.domain.sizes, strict=True)
        ]
    )


def write_codes(data: Dataset, path: str | Path, *, row_group_size: int = 1 << 20) -> None:
    """Write ``data``'s codes to the Parquet file ``path`` in the stored layout."""
    schema = codes_schema(data)
    arrays = [
        pa.array(data.codes[:, j].astype(field.type.to_pandas_dtype()), type=field.type)
        for j, field in enumerate(schema)
    ]
    pq.write_table(pa.Table.from_arrays(arrays, schema=schema), path, row_group_size=row_group_size)
