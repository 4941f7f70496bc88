"""A 200-column raw table built from loans' columns (issue 25: engines at 30–200 columns).

No public table of that width is reachable from here, so this builds one from
../shared/data/raw/loans.csv (10,000 × 55, Lending Club, CC BY-SA 3.0): ``blocks`` copies of its
columns side by side, the first in the original row order and each further copy with its rows
shuffled by a fixed permutation (seed ``seed + block``), cut to ``columns`` columns. Within a
block the real relations between columns hold; across blocks the columns are independent, as
unrelated groups of columns in a wide table are. Column names get ``_b<k>`` for block k ≥ 1.
The values are loans' own: text, money amounts, dates, missing cells. The output is a raw CSV
like the others, for the draft, discovery and ingestion as an owner would bring it.

    python -m benchmarks.wide_table --loans ../shared/data/raw/loans.csv --out /tmp/wide200.csv
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd


def build(loans: Path, columns: int = 200, seed: int = 0) -> pd.DataFrame:
    """The wide table (see the module)."""
    base = pd.read_csv(loans, dtype=str, keep_default_na=False)
    blocks = -(-columns // base.shape[1])
    parts = []
    for block in range(blocks):
        if block == 0:
            part = base
        else:
            order = np.random.default_rng(seed + block).permutation(len(base))
            part = base.iloc[order].reset_index(drop=True)
            part.columns = [f"{name}_b{block}" for name in base.columns]
        parts.append(part)
    wide = pd.concat(parts, axis=1)
    return wide.iloc[:, :columns]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loans", type=Path, default=Path("../shared/data/raw/loans.csv"))
    parser.add_argument("--columns", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    build(args.loans, args.columns, args.seed).to_csv(args.out, index=False)


if __name__ == "__main__":
    main()
