"""Export a raw table's discovered codes and domain for side-by-side runs (issue 25).

For each raw table: the schema draft accepted as is, discovery at its default share of ρ under
(ε, δ = 1e-6) exactly as the upload does it (benchmarks.raw_fidelity.discovered), then the
ingested integer codes written as ``<out>/<table>.csv`` with ``<out>/<table>-domain.json`` (the
format of ../shared/data and of the mbi runners in ../shared/bench/peers), and
``<out>/<table>-meta.json`` with the ρ left for the method. Both rhosynth and a peer then run on
the same codes and the same domain. A benchmark tool, not a service feature: the discovered
codes of a real table are the owner's private data.

    python -m benchmarks.export_codes --data ../shared/data/raw --tables diamonds,loans,flights \
        --epsilon 1 --out /tmp/codes [--nested]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

from benchmarks import raw_fidelity as rf


def export(path: Path, epsilon: float, out: Path, nested: bool = False) -> Path:
    """Write the codes, domain and meta of the table at ``path``; returns the CSV's path. With
    ``nested`` into ``out/<table>/`` (the layout of ../shared/data that benchmarks.quality and
    benchmarks.cost_model read)."""
    from engine.schema_draft import draft_schema

    upload = rf.discovered(path, draft_schema(path), epsilon)
    domain = upload.schema.domain()
    names = list(domain.attributes)
    table = path.stem
    if nested:
        out = out / table
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"{table}.csv"
    codes = np.asarray(upload.codes, dtype=np.int64)
    with target.open("w", encoding="utf-8") as handle:
        handle.write(",".join(names) + "\n")
        np.savetxt(handle, codes, fmt="%d", delimiter=",")
    sizes = {a: int(domain.size(a)) for a in names}
    (out / f"{table}-domain.json").write_text(json.dumps(sizes, indent=1) + "\n")
    meta = {
        "table": table,
        "epsilon": epsilon,
        "rows": int(codes.shape[0]),
        "columns": len(names),
        "method_rho": str(upload.method_rho),
        "discovery_rho": str(upload.discovery_rho),
        "cells_total": math.prod(sizes.values()),
    }
    (out / f"{table}-meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    return target


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="folder of raw <table>.csv")
    parser.add_argument("--tables", default="diamonds,loans,flights")
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--nested", action="store_true", help="write OUT/<table>/<table>.csv")
    args = parser.parse_args(argv)
    for table in rf._csv(args.tables):
        target = export(args.data / f"{table}.csv", args.epsilon, args.out, args.nested)
        print(f"[export_codes] {table}: {target}", file=sys.stderr)


if __name__ == "__main__":
    main()
