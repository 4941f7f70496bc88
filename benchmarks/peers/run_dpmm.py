"""dpmm's MST or AIM pipeline on one raw table (run with the dpmm virtualenv's Python).

``disable_processing=False``: numeric columns (dates and timestamps as days since 1970-01-01)
are binned by PrivTree with ``proc_epsilon`` (split equally between them); categories are read
from the data, as the library does. dpmm's ``epsilon`` is the generative model's alone, so the
whole release's ε is split between the binning (``--preprocessor-share``, 0.1 by default) and
the model, and the model gets the whole δ: (ε, δ)-DP by basic composition. PrivTree first learns
each column's bounds with half its share (dpmm's ``approx_bounds``: a noisy histogram over
powers of two); when no cell clears its threshold, dpmm goes on with NaN bounds and fails in
``pd.cut`` ("Bin labels must be one fewer than the number of bin edges"). See
benchmarks/peers/_common.py for the input and output conversions.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import run


def version() -> str:
    from importlib.metadata import version as dist_version

    return f"dpmm {dist_version('dpmm')}"


def synthesize(
    frame: pd.DataFrame, kinds: dict[str, Any], args: argparse.Namespace
) -> pd.DataFrame:
    from dpmm.pipelines import AIMPipeline, MSTPipeline

    pipeline = {"mst": MSTPipeline, "aim": AIMPipeline}[args.method]
    pipe = pipeline(
        epsilon=(1 - args.preprocessor_share) * args.epsilon,
        delta=args.delta,
        proc_epsilon=args.preprocessor_share * args.epsilon,
        disable_processing=False,
    )
    pipe.fit(frame, random_state=args.seed)
    out = pipe.generate(n_records=len(frame), random_state=args.seed)
    return pd.DataFrame(out, columns=list(frame.columns))


if __name__ == "__main__":
    run(__doc__.split("\n\n")[0], "dpmm", ("mst", "aim"), version, synthesize)
