"""Peak memory and time per cell of one mirror-descent fit (not part of ``make bench``).

Fits a chain of 3-way marginals over ``attributes`` attributes of ``size`` values each for
``iterations`` iterations and prints the model's cells, the time per cell and iteration, and the
process's peak RSS per model cell (after 150 MiB for the interpreter and imports). This is where
``engine.mechanisms.base.MODEL_BYTES_PER_CELL`` and ``WORK_UNITS_PER_SECOND`` come from:

    .venv/bin/python -m benchmarks.model_memory_probe 100 6 50
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np

from engine.domain import Domain
from engine.estimation import NoisyMarginal, estimate, model_size

_BASELINE = 150 * 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("size", type=int)
    parser.add_argument("attributes", type=int)
    parser.add_argument("iterations", type=int)
    args = parser.parse_args()
    names = tuple(f"a{i}" for i in range(args.attributes))
    domain = Domain(names, (args.size,) * args.attributes)
    rng = np.random.default_rng(0)
    cliques = [names[i : i + 3] for i in range(args.attributes - 2)]
    shape = (args.size,) * 3
    measured = [NoisyMarginal(c, rng.random(shape) * 100, 1.0) for c in cliques]
    cells = model_size(domain, cliques)
    start = time.perf_counter()
    estimate(domain, measured, iterations=args.iterations)
    elapsed = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(
        f"cells={cells} iterations={args.iterations} seconds={elapsed:.2f} "
        f"ns_per_cell_iteration={elapsed / args.iterations / cells * 1e9:.1f} "
        f"peak_rss_mib={peak / 2**20:.0f} bytes_per_cell={(peak - _BASELINE) / cells:.1f}"
    )


if __name__ == "__main__":
    main()
