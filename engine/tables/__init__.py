"""Reading and writing tables: the declared schema and the raw values ↔ codes encoding
(encoding.py), CSV read in blocks and typed in Arrow (csv_blocks.py, typed_csv.py, prefetch.py,
buffers.py), the raw numeric values kept beside the codes for the owner tier (raw_values.py),
synthetic codes decoded and written as Parquet or CSV (synthetic_output.py), files written so
that readers never see a partial one (files.py), and local files read against a schema for the
engine's commands (local.py).

Nothing here fits a model or spends budget; what reads private values says so in its docstring.
"""
