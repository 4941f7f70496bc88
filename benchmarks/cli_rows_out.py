"""Rows out, end to end, and ``--help`` (issue 25; not part of ``make bench``).

Runs the installed ``rhosynth`` entry point as a user does, one process per command, with
``PYTHONPATH`` pointing at each source tree given (``--tree``; give two to compare, e.g. an export
of main and this checkout), taking turns in every round:

- ``rhosynth [SUBCOMMAND] --help`` for the top level and each subcommand;
- ``rhosynth sample MODEL --rows N --seed 1 --out F`` to CSV and to Parquet, MODEL an ``mst``
  model of adult (ρ = 1, seed 1) saved by ``rhosynth synthesize --save-model`` once, with the
  first tree.

Wall time is measured around the process; CPU is the child's user + system time (all threads).
Prints the best of ``--repeat`` rounds per command and tree, as Markdown:

    python -m benchmarks.cli_rows_out --data ../shared/data/adult --tree /tmp/main-export --tree .
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HELP = [[], ["synthesize"], ["sample"], ["evaluate"], ["report"], ["schema", "draft"], ["remote"]]


def _run(tree: Path, args: list[str]) -> tuple[float, float]:
    """(wall s, CPU s) of one ``rhosynth`` process with ``tree`` first on the path."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    executable = Path(sys.executable).with_name("rhosynth")
    started = time.perf_counter()
    process = subprocess.Popen(  # noqa: S603 - our own entry point, fixed arguments
        [str(executable), *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        assert process.stderr is not None
        raise SystemExit(f"rhosynth {' '.join(args)} failed: {process.stderr.read().decode()}")
    return wall, usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="folder with adult.csv")
    parser.add_argument("--tree", type=Path, action="append", required=True)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    options = parser.parse_args()
    trees = [tree.resolve() for tree in options.tree]
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        model = folder / "adult-mst.model"
        _run(
            trees[0],
            [
                "synthesize",
                str(options.data / "adult.csv"),
                "--schema",
                str(options.data / "adult-domain.json"),
                "--method",
                "mst",
                "--rho",
                "1",
                "--seed",
                "1",
                "--no-progress",
                "--out",
                str(folder / "fit.csv"),
                "--save-model",
                str(model),
            ],
        )
        commands: list[tuple[str, list[str]]] = [
            (" ".join(["rhosynth", *words, "--help"]), [*words, "--help"]) for words in HELP
        ]
        for suffix in ("csv", "parquet"):
            out = str(folder / f"rows.{suffix}")
            args = ["sample", str(model), "--rows", str(options.rows), "--seed", "1"]
            commands.append((f"sample {options.rows:,} rows → {suffix}", [*args, "--out", out]))
        best: dict[tuple[str, int], tuple[float, float]] = {}
        loads = [os.getloadavg()[0]]
        for _ in range(options.repeat):
            for label, args in commands:
                for index, tree in enumerate(trees):
                    wall, cpu = _run(tree, args)
                    old = best.get((label, index))
                    best[(label, index)] = (
                        (wall, cpu) if old is None else (min(old[0], wall), min(old[1], cpu))
                    )
            loads.append(os.getloadavg()[0])
    header = "| command | " + " | ".join(f"{tree.name or tree} wall s | CPU s" for tree in trees)
    print(header + " |")
    print("|---|" + "---:|---:|" * len(trees))
    for label, _ in commands:
        cells = " | ".join(
            f"{best[(label, i)][0]:.2f} | {best[(label, i)][1]:.2f}" for i in range(len(trees))
        )
        print(f"| {label} | {cells} |")
    print(f"\n1-minute load average over the rounds: {', '.join(f'{v:.1f}' for v in loads)}")


if __name__ == "__main__":
    main()
