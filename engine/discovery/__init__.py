"""Differentially private discovery of a column's domain: bin edges and category lists.

When an owner uploads a table without declaring a column's bins or categories, the domain is
learned from the data by the mechanisms here, and their cost is charged to the dataset's ledger
like any other release. Every function in this package takes the column's statistics (values or
counts), a budget, and an explicit noise ``source`` (``None``: the OS CSPRNG), and returns a frozen
result that carries its :class:`DiscoveryCost`. See docs/discovery.md.
"""

from engine.discovery.categories import (
    MAX_CANDIDATES,
    DiscoveredCategories,
    discover_from_candidates,
    discover_open_set,
)
from engine.discovery.cost import DiscoveryCost
from engine.discovery.quantiles import (
    QuantileBins,
    QuantileGrid,
    dp_quantile_edges,
    dp_quantile_edges_from_counts,
)
from engine.discovery.tails import discrete_gaussian_tail_bound, smallest_tail_threshold

__all__ = [
    "MAX_CANDIDATES",
    "DiscoveredCategories",
    "DiscoveryCost",
    "QuantileBins",
    "QuantileGrid",
    "discover_from_candidates",
    "discover_open_set",
    "discrete_gaussian_tail_bound",
    "dp_quantile_edges",
    "dp_quantile_edges_from_counts",
    "smallest_tail_threshold",
]
