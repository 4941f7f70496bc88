"""Helpers for the estimation tests: brute-force joints and correlated random data."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from engine.domain import Dataset, Domain

FloatArray = npt.NDArray[np.float64]


def brute_force_joint(
    domain: Domain, potentials: Mapping[tuple[str, ...], FloatArray], total: float
) -> FloatArray:
    """The full joint ∝ exp(Σ potentials) over the domain (axes in domain order), summing to total."""
    log_joint = np.zeros(domain.sizes)
    for clique, values in potentials.items():
        order = [a for a in domain.attributes if a in clique]
        aligned = values.transpose([clique.index(a) for a in order])
        shape = [domain.size(a) if a in clique else 1 for a in domain.attributes]
        log_joint = log_joint + aligned.reshape(shape)
    joint = np.exp(log_joint - log_joint.max())
    scaled: FloatArray = joint * (total / joint.sum())
    return scaled


def marginal_of(domain: Domain, joint: FloatArray, attributes: Sequence[str]) -> FloatArray:
    """Marginal of a domain-ordered joint on ``attributes`` (axes in the order given)."""
    axes = tuple(i for i, a in enumerate(domain.attributes) if a not in attributes)
    kept = [a for a in domain.attributes if a in attributes]
    summed = joint.sum(axis=axes)
    result: FloatArray = np.asarray(summed).transpose([kept.index(a) for a in attributes])
    return result


def correlated_dataset(domain: Domain, rows: int, seed: int, concentration: float = 0.5) -> Dataset:
    """Rows from a random Bayesian chain over the domain's attributes (each column depends on
    the previous one), so that 2-way marginals carry real correlation. A larger Dirichlet
    ``concentration`` gives flatter conditionals (fewer empty cells)."""
    rng = np.random.default_rng(seed)
    codes = np.empty((rows, len(domain)), dtype=np.int64)
    previous: npt.NDArray[np.int64] | None = None
    previous_size = 1
    for j, size in enumerate(domain.sizes):
        table = rng.dirichlet(np.full(size, concentration), size=previous_size)
        parent = np.zeros(rows, dtype=np.int64) if previous is None else previous
        cdf = np.cumsum(table, axis=1)[parent]
        draws = (rng.random((rows, 1)) > cdf).sum(axis=1)
        codes[:, j] = np.minimum(draws, size - 1)
        previous, previous_size = codes[:, j], size
    return Dataset(domain, codes)


# Potentials on a chain a–b–c–d–e (root b–c) that cancel across cliques by hundreds of nats, as
# a long mirror-descent fit leaves them. Before the error bound, the probability-space pass
# returned NaN for the first (a downward message overflowed) and, silently, the marginals of a
# different distribution for the second (every cell carrying the mass underflowed on the way up,
# and a surviving tiny cell passed the 1e-250 guards and took the mass).
CANCELLING_CHAINS = [
    {
        ("a", "b"): [[188.0, 1088.0], [-395.0, 127.0]],
        ("b", "c"): [[-797.0, 271.0], [-806.0, 278.0]],
        ("c", "d"): [[414.0, 577.0], [-154.0, -818.0]],
        ("d", "e"): [[514.0, 1198.0], [-382.0, 263.0]],
    },
    {
        ("a", "b"): [[172.0, -82.0], [142.0, -217.0]],
        ("b", "c"): [[463.0, 91.0], [28.0, -145.0]],
        ("c", "d"): [[-209.0, 633.0], [78.0, -562.0]],
        ("d", "e"): [[-69.0, 771.0], [-351.0, -619.0]],
    },
]
CHAIN_DOMAIN = Domain.from_mapping({"a": 2, "b": 2, "c": 2, "d": 2, "e": 2})
