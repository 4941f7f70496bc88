"""What a job's input rows cost in address space, per method (issue 24 §1).

The worker raises each job's memory limit by :func:`app.jobs.limits.input_allowance_bytes` of
the dataset's table, so that whether a job fits depends on the public estimate only. This
measures, per method, the peak address space (VmPeak) of a child process that loads a table of
``rows`` one-byte codes the way the worker does (read-only, column-major, narrow) and runs the
method with its defaults and a fixed, small output (``--out-rows``), at two row counts; the slope
between them is the address space per input cell, which must stay below the allowance's
2 × width + INPUT_BYTES_PER_CELL bytes per cell (width 1 here).

    python -m benchmarks.input_allowance --rows 250000,2000000 --update docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path

import numpy as np

from app.jobs.limits import INPUT_BYTES_PER_CELL
from benchmarks.sections import git_commit, markdown_table, update_or_print
from engine.mechanisms import get_mechanism

HEADING = "## Input allowance: address space per input cell (issue 24 §1)"
SIZES = (9, 16, 7, 5, 12, 2, 3, 10)  # 3.6 M cells: within cipher's full joint
METHODS = ("independent", "mst", "aim", "privsyn", "ppsyn", "privmrf", "cipher", "dpcopula")


def _peak_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmPeak:"):
            return int(line.split()[1])
    raise RuntimeError("no VmPeak")


def child(method: str, rows: int, out_rows: int) -> None:
    from engine.domain import Dataset, Domain
    from engine.mechanisms import get_mechanism

    rng = np.random.default_rng(0)
    codes = np.empty((rows, len(SIZES)), dtype=np.uint8, order="F")
    # In chunks, so that making the table adds nothing per row beyond the table itself.
    for start in range(0, rows, 1 << 16):
        stop = min(rows, start + (1 << 16))
        latent = rng.integers(0, 4, stop - start)
        for j, size in enumerate(SIZES):
            codes[start:stop, j] = (latent * (j + 1) + rng.integers(0, 3, stop - start)) % size
    codes.flags.writeable = False
    domain = Domain(tuple(f"c{j}" for j in range(len(SIZES))), SIZES)
    data = Dataset(domain, codes)
    mechanism = get_mechanism(method)
    params = mechanism.validate_params({})
    before = _peak_kib()
    mechanism.run(data, Fraction(1), params, rng=rng, rows=out_rows)
    print(json.dumps({"before_kib": before, "peak_kib": _peak_kib()}))


def measure(method: str, rows: int, out_rows: int) -> dict[str, int]:
    command = [sys.executable, "-m", "benchmarks.input_allowance", "--child", method, str(rows)]
    done = subprocess.run(  # noqa: S603 - this script, with its own arguments
        [*command, "--out-rows", str(out_rows)],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, int] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--rows", default="250000,2000000")
    parser.add_argument("--out-rows", type=int, default=1000)
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--update", type=Path)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]), args.out_rows)
        return
    small, large = (int(r) for r in args.rows.split(","))
    cells = (large - small) * len(SIZES)
    allowed = 2 * 1 + INPUT_BYTES_PER_CELL
    rows = []
    for method in args.methods.split(","):
        try:
            a, b = measure(method, small, args.out_rows), measure(method, large, args.out_rows)
        except subprocess.CalledProcessError as error:
            rows.append([method, "–", "–", "–", f"{allowed}", f"failed: {error.stderr[-200:]!r}"])
            continue
        slope = (b["peak_kib"] - a["peak_kib"]) * 1024 / cells
        # The cache's cap is added whole (it grows with the rows up to it): compare the growth
        # with the growth of the per-cell part plus that cap.
        cache = get_mechanism(method).counting_cache_bytes
        within = slope * cells <= allowed * cells + cache
        rows.append(
            [
                method,
                f"{a['peak_kib'] / 1024:.0f}",
                f"{b['peak_kib'] / 1024:.0f}",
                f"{slope:.1f}",
                f"{allowed}" + (f" + {cache // 2**20} MiB" if cache else ""),
                "yes" if within else "**no**",
            ]
        )
        print(method, rows[-1], file=sys.stderr)
    command = "python -m benchmarks.input_allowance " + " ".join(sys.argv[1:])
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    text = "\n".join(
        [
            HEADING,
            "",
            f"Measured by `{command}` on {now}, commit `{git_commit(Path.cwd(), length=7)}`. "
            f"Per method (defaults, ρ = 1, {args.out_rows} output rows), the peak address space "
            f"(VmPeak) of a child process that holds a table of one-byte codes ({len(SIZES)} "
            f"columns) and runs the method, at {small:,} and {large:,} rows; the slope is the "
            "address space per extra input cell. The worker raises a job's memory limit by "
            "rows × columns × (2 × width + INPUT_BYTES_PER_CELL), plus 512 MiB for the methods "
            "with a counting cache (aim, ppsyn, privmrf) "
            "(`app.jobs.limits.input_allowance_bytes`), which includes the table itself "
            "(1 byte per cell here, in the slope too).",
            "",
            *markdown_table(
                [
                    "method",
                    f"peak MiB at {small:,}",
                    f"peak MiB at {large:,}",
                    "bytes per input cell",
                    "allowed",
                    "within",
                ],
                rows,
                "lrrrrl",
            ),
        ]
    )
    update_or_print(args.update, HEADING, text + "\n")


if __name__ == "__main__":
    main()
