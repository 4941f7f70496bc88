"""smartnoise-synth's MST or AIM on one raw table (run with the smartnoise virtualenv's Python).

Categorical columns go through its label transformer (categories read from the data, as the library
does), continuous ones through its bin transformer (10 equal-width bins, its default for declared
continuous columns; bounds learned with pure-ε DP from ``preprocessor_eps`` =
``--preprocessor-share`` (0.1 by default) × ε, split equally between them; when no cell of the
bounds' noisy histogram clears its threshold, the fit fails with "BinTransformer could not find
bounds"; such columns are found first with the same transformer and left out, see
``_unbounded``). ``epsilon`` passed to ``Synthesizer.create`` is the whole release's: the
preprocessor's ε is subtracted from it before training (snsynth/base.py), and the synthesizer
gets the whole δ, so the release is (ε, δ)-DP by basic composition. smartnoise-synth takes no
seed: numpy's global generator is seeded instead. See benchmarks/peers/_common.py for the input
and output conversions.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import run


def version() -> str:
    from importlib.metadata import version as dist_version

    return f"smartnoise-synth {dist_version('smartnoise-synth')}"


def synthesize(
    frame: pd.DataFrame, kinds: dict[str, Any], args: argparse.Namespace
) -> pd.DataFrame:
    from snsynth import Synthesizer

    np.random.seed(args.seed)  # smartnoise-synth draws from numpy's global generator
    categorical = [c["name"] for c in kinds["columns"] if c["kind"] == "categorical"]
    continuous = [c["name"] for c in kinds["columns"] if c["kind"] == "continuous"]
    unbounded = _unbounded(frame, continuous, args.preprocessor_share * args.epsilon)
    if unbounded:
        # Left out rather than failing the whole run; the metric counts them as worst.
        print(f"columns without DP bounds, left out: {', '.join(unbounded)}", file=sys.stderr)
        frame = frame.drop(columns=unbounded)
        continuous = [c for c in continuous if c not in unbounded]
    synth = Synthesizer.create(args.method, epsilon=args.epsilon, delta=args.delta)
    synth.fit(
        frame,
        categorical_columns=categorical,
        continuous_columns=continuous,
        preprocessor_eps=args.preprocessor_share * args.epsilon,
        nullable=True,
    )
    out = synth.sample(len(frame))
    return pd.DataFrame(out, columns=list(frame.columns))


def _unbounded(frame: pd.DataFrame, continuous: list[str], epsilon: float) -> list[str]:
    """The continuous columns whose DP bounds smartnoise-synth cannot find at its share of the
    preprocessing ε (split equally between them, as its fit does): each would fail the whole fit
    ("BinTransformer could not find bounds"). A favour to the peer, outside its DP accounting:
    the check reads the data once more with the same mechanism."""
    from snsynth.transform.bin import BinTransformer

    if not continuous:
        return []
    failing = []
    for name in continuous:
        transformer = BinTransformer(bins=10, epsilon=epsilon / len(continuous), nullable=True)
        try:
            transformer.fit(list(frame[name]))
        except ValueError:
            failing.append(name)
    return failing


if __name__ == "__main__":
    run(__doc__.split("\n\n")[0], "smartnoise", ("mst", "aim"), version, synthesize)
