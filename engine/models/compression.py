"""Domain compression from noisy one-way marginals (post-processing).

MST (McKenna, Miklau, Sheldon 2021) merges, per attribute, every value whose noisy count is below
3σ into one shared code before it measures two-way marginals: such values are indistinguishable
from noise, and merging them makes every later marginal smaller. The supports are computed from
noisy counts only, so compressing the data, measuring the compressed data and decompressing the
synthetic rows are all post-processing of already-paid measurements (no extra budget).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from engine.counting import CountingEngine, recoded_engine
from engine.domain import Dataset, Domain
from engine.estimation import NoisyMarginal
from engine.estimation.synthesis import draw_balanced
from engine.marginals import Measurement

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
CodeArray = npt.NDArray[np.unsignedinteger[Any]]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, eq=False)
class Compression:
    """Per attribute: which original codes keep a code of their own (``supports[j][v]``)."""

    original: Domain
    supports: tuple[BoolArray, ...]
    weights: tuple[FloatArray, ...]
    """Per attribute, the noisy counts of the original values (used to decompress merged codes)."""

    def __post_init__(self) -> None:
        if len(self.supports) != len(self.original) or len(self.weights) != len(self.original):
            raise ValueError("one support and one weight vector per attribute")
        for size, support, weight in zip(
            self.original.sizes, self.supports, self.weights, strict=True
        ):
            if support.shape != (size,) or weight.shape != (size,):
                raise ValueError("supports and weights must match the attribute sizes")

    @classmethod
    def from_noisy_counts(
        cls,
        original: Domain,
        noisy_counts: Sequence[npt.ArrayLike],
        sigmas: Sequence[float],
        threshold: float = 3.0,
    ) -> Compression:
        """Keep the values whose noisy count is at least ``threshold``·σ (3σ is the MST rule)."""
        supports = []
        weights = []
        for counts, sigma in zip(noisy_counts, sigmas, strict=True):
            values = np.asarray(counts, dtype=np.float64).ravel()
            supports.append(values >= threshold * sigma)
            weights.append(values)
        return cls(original, tuple(supports), tuple(weights))

    @classmethod
    def identity(cls, original: Domain, noisy_counts: Sequence[npt.ArrayLike]) -> Compression:
        """Keep every value (no compression)."""
        return cls(
            original,
            tuple(np.ones(size, dtype=np.bool_) for size in original.sizes),
            tuple(np.asarray(c, dtype=np.float64).ravel() for c in noisy_counts),
        )

    def merged(self, j: int) -> bool:
        """Whether attribute ``j`` has a shared code for its unsupported values."""
        return not bool(self.supports[j].all())

    @property
    def domain(self) -> Domain:
        sizes = tuple(
            int(support.sum()) + (1 if self.merged(j) else 0)
            for j, support in enumerate(self.supports)
        )
        return Domain(self.original.attributes, sizes)

    def mapping(self, j: int) -> IntArray:
        """Original code → compressed code for attribute ``j`` (kept values keep their order)."""
        support = self.supports[j]
        kept = int(support.sum())
        out = np.full(support.size, kept, dtype=np.int64)
        out[support] = np.arange(kept, dtype=np.int64)
        return out

    def axis_maps(self, attributes: Sequence[str]) -> tuple[IntArray | None, ...]:
        """For a marginal of ``attributes`` measured on compressed codes: each attribute's
        original → compressed code map (:meth:`mapping`), ``None`` where nothing was merged."""
        return tuple(
            self.mapping(j) if self.merged(j) else None
            for j in (self.original.index(name) for name in attributes)
        )

    def compress_codes(self, codes: npt.NDArray[np.integer[Any]]) -> CodeArray:
        """The re-coded table: column-major (each column written and later counted as contiguous
        memory), in the narrowest unsigned type of the compressed domain (a byte per cell for
        most tables: at 10 M rows × 14 columns 140 MB instead of 1.1 GB of int64)."""
        dtype = self.domain.code_dtype
        out = np.empty(codes.shape, dtype=dtype, order="F")
        for j in range(codes.shape[1]):
            out[:, j] = self.mapping(j).astype(dtype)[codes[:, j]]
        return out

    def compress_counts(self, j: int, counts: npt.ArrayLike) -> FloatArray:
        """A one-way vector over the original values, re-expressed on the compressed codes."""
        values = np.asarray(counts, dtype=np.float64).ravel()
        support = self.supports[j]
        if not self.merged(j):
            return values.copy()
        return np.append(values[support], values[~support].sum())

    @property
    def original_dtype(self) -> np.dtype[np.unsignedinteger[Any]]:
        """The narrowest unsigned type of the original domain's codes (:meth:`decompress_codes`
        writes them in it)."""
        return self.original.code_dtype

    def decompress_codes(
        self,
        codes: npt.NDArray[np.integer[Any]],
        rng: np.random.Generator,
        out: CodeArray | None = None,
    ) -> CodeArray:
        """Compressed codes back to original codes; a merged code becomes one of its values,
        drawn in proportion to their (clipped) noisy counts, uniformly if those are all ≤ 0.

        The result is in :attr:`original_dtype`. ``out`` (of that type and the shape of
        ``codes``; it may be ``codes`` itself, which saves a copy of the table) receives it; by
        default a new column-major array does.
        """
        dtype = self.original_dtype
        if out is None:
            out = np.empty(codes.shape, dtype=dtype, order="F")  # filled column by column
        elif out.shape != codes.shape or out.dtype != dtype:
            raise ValueError(f"out must be a {dtype} array of the shape of codes")
        # Every merged column's draws first, from the compressed codes (``out`` may be ``codes``).
        merged: dict[int, tuple[IntArray, IntArray]] = {}
        for j in range(codes.shape[1]):
            if not self.merged(j):
                continue
            support = self.supports[j]
            rare = np.flatnonzero(~support)
            merged_rows = np.flatnonzero(codes[:, j] == support.size - rare.size)
            weight = np.clip(self.weights[j][rare], 0.0, None)
            p = weight / weight.sum() if weight.sum() > 0 else np.full(rare.size, 1.0 / rare.size)
            # Controlled rounding of the merged rows over the merged values, spread evenly across
            # the other attributes (the same balanced assignment the model's sampler uses).
            others = np.array([u for u in range(codes.shape[1]) if u != j], dtype=np.int64)
            order = others[rng.permutation(others.size)]
            strata = np.empty((merged_rows.size, order.size), dtype=np.int64)
            for position, u in enumerate(order):
                strata[:, position] = codes[merged_rows, u]
            merged[j] = (merged_rows, rare[draw_balanced(p, strata, rng)])
        for j in range(codes.shape[1]):
            # Kept codes map straight back; the merged code (the last) is overwritten below.
            lookup = np.append(np.flatnonzero(self.supports[j]), 0).astype(dtype)
            out[:, j] = lookup[codes[:, j]]
            if j in merged:
                rows, values = merged[j]
                out[rows, j] = values
        return out


def measured_axis_maps(
    compression: Compression, measurements: Sequence[Measurement], on_original: int
) -> tuple[tuple[IntArray | None, ...], ...]:
    """``SynthesisResult.axis_maps`` of a run whose first ``on_original`` measurements were
    made on the original codes (the one-ways) and the rest on ``compression``'s codes."""
    return tuple(
        (None,) * len(m.attributes) if i < on_original else compression.axis_maps(m.attributes)
        for i, m in enumerate(measurements)
    )


def recode(data: Dataset | CountingEngine, compression: Compression) -> Dataset | CountingEngine:
    """``data`` re-coded by ``compression``: codes in memory are re-coded in memory (a
    :class:`Dataset`, as before engines existed); any other counting engine counts over the
    public code maps (:func:`engine.counting.recoded_engine`: inside the DuckDB or Spark query).
    Either way every later table is the same exact table of the re-coded rows."""
    if isinstance(data, Dataset):
        recoded = compression.compress_codes(data.codes)
        recoded.flags.writeable = False  # Dataset keeps a read-only array without copying it
        return Dataset(compression.domain, recoded)
    maps = [
        compression.mapping(j) if compression.merged(j) else None
        for j in range(len(compression.original))
    ]
    return recoded_engine(data, compression.domain, maps)


def compress_after_one_ways(
    data: Dataset | CountingEngine,
    one_ways: Sequence[Measurement],
    compress: bool,
    threshold: float = 3.0,
) -> tuple[Compression, Dataset | CountingEngine, list[NoisyMarginal]]:
    """The step MST, AIM, PPSyn and PrivMRF share after measuring every one-way marginal: the
    compression those noisy counts define (identity when ``compress`` is off), the data re-coded
    by it (:func:`recode`: in memory for a :class:`Dataset`, in the query for another counting
    engine), and the one-ways as estimator inputs on the compressed domain.

    Post-processing of the one-way releases plus a public re-coding: no further privacy cost.
    The re-coded tables are the same exact integers whichever engine counts them.
    """
    original = data.domain
    sigmas = [math.sqrt(float(m.sigma2)) for m in one_ways]
    counts = [m.noisy_counts for m in one_ways]
    compression = (
        Compression.from_noisy_counts(original, counts, sigmas, threshold)
        if compress
        else Compression.identity(original, counts)
    )
    compressed = recode(data, compression)
    noisy = [
        NoisyMarginal((attr,), compression.compress_counts(j, m.noisy_counts), sigma)
        for j, (attr, m, sigma) in enumerate(
            zip(original.attributes, one_ways, sigmas, strict=True)
        )
    ]
    return compression, compressed, noisy
