"""The kinds of fitted model the mechanisms leave behind (see :mod:`engine.models.fitted`).

* ``"independent"``: one probability vector per attribute (the independent method).
* ``"graphical"``: a graphical model's log-potentials on its junction tree's maximal cliques, over
  the compressed domain, with the compression (supports and decompression weights from noisy
  one-way counts) and the synthesis method (MST, AIM, PPSyn, PrivMRF).
* ``"joint"``: a full joint probability table over the attributes with more than one value,
  with the synthesis method (CIPHER).
* ``"copula"``: DPCopula's partitions (noisy-count weights), per-partition margins, correlation
  matrices and margin re-orderings.
* ``"gum"``: PrivSyn's consistent noisy one-way and target marginals with GUM's settings and the
  compression; sampling re-runs GUM.

Every array here is a post-processing of noisy measurements or public information: sampling and
marginals from these models cost no privacy budget (module docstring of engine.models.fitted).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
import numpy.typing as npt

from engine.domain import CodeArray, Domain
from engine.estimation import GraphicalModel
from engine.estimation.synthesis import round_counts
from engine.models.compression import Compression
from engine.models.copula import allocate_rows, sample_copula
from engine.models.fitted import (
    FloatArray,
    IntArray,
    ModelError,
    check_array,
    probabilities,
    register_kind,
)
from engine.models.gum import GUMSettings, Target, synthesize_records
from engine.sampling import sample_categorical

Synthesis = Literal["balanced", "round", "sample"]
_SYNTHESES = ("balanced", "round", "sample")
MARGINAL_SAMPLE_ROWS = 200_000
"""Rows drawn (seed :data:`MARGINAL_SAMPLE_SEED`) to estimate a marginal a kind cannot project
exactly (the copula's marginals across copula attributes)."""
MARGINAL_SAMPLE_SEED = 20_260_101


def _names(raw: Any, domain: Domain, what: str) -> tuple[str, ...]:
    if not isinstance(raw, list) or not all(isinstance(a, str) for a in raw):
        raise ModelError(f"{what} must be a list of column names")
    names = tuple(raw)
    if len(set(names)) != len(names) or any(a not in domain.attributes for a in names):
        raise ModelError(f"{what} names unknown or repeated columns")
    return names


def _synthesis(raw: Any) -> Synthesis:
    if raw not in _SYNTHESES:
        raise ModelError("unknown synthesis method")
    value: Synthesis = raw
    return value


def _product_marginal(tables: Sequence[FloatArray]) -> FloatArray:
    out = np.ones(())
    for table in tables:
        out = np.multiply.outer(out, table)
    return np.asarray(out, dtype=np.float64)


def _compression_arrays(compression: Compression) -> dict[str, npt.NDArray[Any]]:
    out: dict[str, npt.NDArray[Any]] = {}
    for j, (support, weight) in enumerate(
        zip(compression.supports, compression.weights, strict=True)
    ):
        out[f"support{j}"] = np.asarray(support, dtype=np.bool_)
        out[f"weight{j}"] = np.asarray(weight, dtype=np.float64)
    return out


def _load_compression(domain: Domain, arrays: Mapping[str, npt.NDArray[Any]]) -> Compression:
    supports = tuple(
        check_array(arrays[f"support{j}"], "a support", dtype="bool", shape=(size,))
        for j, size in enumerate(domain.sizes)
    )
    weights = tuple(
        check_array(arrays[f"weight{j}"], "a weight vector", dtype="float", shape=(size,))
        for j, size in enumerate(domain.sizes)
    )
    return Compression(domain, supports, weights)


def _histogram(codes: CodeArray, domain: Domain, attributes: Sequence[str]) -> FloatArray:
    """The normalised contingency table of ``attributes`` in ``codes``."""
    shape = tuple(domain.size(a) for a in attributes)
    flat = np.ravel_multi_index(tuple(codes[:, domain.index(a)] for a in attributes), shape)
    counts = np.bincount(flat, minlength=math.prod(shape)).astype(np.float64)
    return np.asarray(counts.reshape(shape) / max(1, codes.shape[0]), dtype=np.float64)


@register_kind
@dataclass(frozen=True, eq=False)
class IndependentModel:
    """One probability vector per attribute, in domain order; rows are drawn column by column
    with :func:`engine.sampling.sample_categorical` (i.i.d.)."""

    kind: ClassVar[str] = "independent"
    marginals: tuple[FloatArray, ...]

    def __post_init__(self) -> None:
        object.__setattr__(
            self,
            "marginals",
            tuple(probabilities(m, "a one-way probability vector") for m in self.marginals),
        )

    @property
    def cells(self) -> int:
        return sum(m.size for m in self.marginals)

    def _check(self, domain: Domain) -> None:
        if tuple(m.size for m in self.marginals) != domain.sizes:
            raise ModelError("one probability vector per attribute, of its size")

    def sample(self, domain: Domain, rows: int, rng: np.random.Generator) -> IntArray:
        self._check(domain)
        codes = np.empty((rows, len(domain)), dtype=np.int64)
        for j, p in enumerate(self.marginals):
            codes[:, j] = sample_categorical(p, rows, rng)
        return codes

    def marginal(self, domain: Domain, attributes: Sequence[str]) -> FloatArray:
        self._check(domain)
        return _product_marginal([self.marginals[domain.index(a)] for a in attributes])

    def header(self) -> dict[str, Any]:
        return {}

    def arrays(self) -> dict[str, npt.NDArray[Any]]:
        return {f"p{j}": m for j, m in enumerate(self.marginals)}

    @classmethod
    def load(
        cls, domain: Domain, header: Mapping[str, Any], arrays: Mapping[str, npt.NDArray[Any]]
    ) -> IndependentModel:
        del header
        model = cls(
            tuple(
                check_array(arrays[f"p{j}"], "a probability vector", dtype="float", shape=(size,))
                for j, size in enumerate(domain.sizes)
            )
        )
        model._check(domain)
        return model


@register_kind
@dataclass(frozen=True, eq=False)
class GraphicalModelKind:
    """A graphical model over the compressed domain (its log-potentials on the maximal cliques of
    its junction tree, and its total), the compression back to the original codes, and the
    synthesis method of the run (``GraphicalModel.synthetic_data``).

    The model is rebuilt from the potentials (``GraphicalModel.from_potentials``) at
    construction, in memory and when loaded alike, so a model samples the same codes before and
    after a round trip through a file."""

    kind: ClassVar[str] = "graphical"
    compression: Compression
    cliques: tuple[tuple[str, ...], ...]
    potentials: tuple[FloatArray, ...]
    total: float
    synthesis: Synthesis

    def __post_init__(self) -> None:
        if not isinstance(self.compression, Compression):
            raise ModelError("compression must be a Compression")
        small = self.compression.domain
        cliques = tuple(tuple(c) for c in self.cliques)
        if len(cliques) != len(self.potentials) or not cliques:
            raise ModelError("one potential per clique")
        potentials = []
        for clique, values in zip(cliques, self.potentials, strict=True):
            if not clique or any(a not in small.attributes for a in clique):
                raise ModelError("a clique names unknown columns")
            shape = tuple(small.size(a) for a in clique)
            potentials.append(check_array(values, "a potential", dtype="float", shape=shape))
        total = float(self.total)
        if not (math.isfinite(total) and total > 0):
            raise ModelError("the model's total must be positive")
        _synthesis(self.synthesis)
        try:
            model = GraphicalModel.from_potentials(
                small, dict(zip(cliques, potentials, strict=True)), total
            )
        except (ValueError, KeyError) as error:
            raise ModelError(f"the potentials do not make a model ({error})") from None
        object.__setattr__(self, "cliques", cliques)
        object.__setattr__(self, "potentials", tuple(potentials))
        object.__setattr__(self, "total", total)
        object.__setattr__(self, "_model", model)

    @classmethod
    def from_fit(
        cls, model: GraphicalModel, compression: Compression, synthesis: Synthesis
    ) -> GraphicalModelKind:
        """The saved form of a fitted ``model`` (on ``compression.domain``)."""
        return cls(
            compression=compression,
            cliques=tuple(model.potentials),
            potentials=tuple(model.potentials.values()),
            total=model.total,
            synthesis=synthesis,
        )

    @property
    def model(self) -> GraphicalModel:
        found: GraphicalModel = self.__dict__["_model"]
        return found

    @property
    def cells(self) -> int:
        return int(self.model.cells) + 2 * sum(self.compression.original.sizes)

    def _check(self, domain: Domain) -> None:
        if self.compression.original != domain:
            raise ModelError("the compression does not match the model's domain")

    def sample(self, domain: Domain, rows: int, rng: np.random.Generator) -> CodeArray:
        self._check(domain)
        dtype = self.compression.original_dtype
        out: CodeArray | None = None
        # Drawn and decompressed a batch at a time (memory bounded per batch); each batch's
        # merged values are drawn with the batch's own generator, after its rows.
        for start, small, generator in self.model.synthetic_batches(
            rows, rng, method=self.synthesis
        ):
            # In place when the compressed and original codes share a type (``small`` is this
            # batch's own table), so no second copy is allocated.
            same = small.dtype == dtype
            codes = self.compression.decompress_codes(small, generator, out=small if same else None)
            if out is None:
                if codes.shape[0] == rows:
                    return codes  # one batch: no copy
                out = np.empty((rows, len(domain)), dtype=dtype, order="F")
            out[start : start + codes.shape[0]] = codes
        assert out is not None
        return out

    def marginal(self, domain: Domain, attributes: Sequence[str]) -> FloatArray:
        """Exact: the projection on the compressed domain, each merged cell spread over its
        original values in proportion to their clipped noisy counts (uniformly if none is
        positive), which is the expected share the decompression gives them."""
        self._check(domain)
        table = self.model.project(list(attributes)) / self.model.total
        for axis, name in enumerate(attributes):
            j = domain.index(name)
            if not self.compression.merged(j):
                continue
            mapping = self.compression.mapping(j)
            support = self.compression.supports[j]
            share = np.ones(mapping.size)
            weight = np.clip(self.compression.weights[j][~support], 0.0, None)
            rare = (
                weight / weight.sum() if weight.sum() > 0 else np.full(weight.size, 1 / weight.size)
            )
            share[~support] = rare
            shape = [1] * table.ndim
            shape[axis] = mapping.size
            table = np.take(table, mapping, axis=axis) * share.reshape(shape)
        return np.asarray(table, dtype=np.float64)

    def header(self) -> dict[str, Any]:
        return {
            "cliques": [list(c) for c in self.cliques],
            "total": self.total,
            "synthesis": self.synthesis,
        }

    def arrays(self) -> dict[str, npt.NDArray[Any]]:
        out = _compression_arrays(self.compression)
        for i, values in enumerate(self.potentials):
            out[f"theta{i}"] = values
        return out

    @classmethod
    def load(
        cls, domain: Domain, header: Mapping[str, Any], arrays: Mapping[str, npt.NDArray[Any]]
    ) -> GraphicalModelKind:
        compression = _load_compression(domain, arrays)
        small = compression.domain
        raw_cliques = header["cliques"]
        if not isinstance(raw_cliques, list) or len(raw_cliques) > len(arrays):
            raise ModelError("the model's cliques are malformed")
        cliques = tuple(_names(c, small, "a clique") for c in raw_cliques)
        potentials = []
        for i, clique in enumerate(cliques):
            shape = tuple(small.size(a) for a in clique)
            potentials.append(
                check_array(arrays[f"theta{i}"], "a potential", dtype="float", shape=shape)
            )
        total = header["total"]
        if isinstance(total, bool) or not isinstance(total, int | float):
            raise ModelError("the model's total must be a number")
        return cls(
            compression=compression,
            cliques=cliques,
            potentials=tuple(potentials),
            total=float(total),
            synthesis=_synthesis(header["synthesis"]),
        )


def sample_cells(joint: FloatArray, n: int, synthesis: str, rng: np.random.Generator) -> IntArray:
    """``n`` flat cell indices of ``joint`` (post-processing): i.i.d. for ``"sample"``, else by
    controlled rounding of ``n·joint`` in random order."""
    flat = joint.ravel()
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if synthesis == "sample":
        return sample_categorical(flat, n, rng)
    counts = round_counts((n * flat)[None, :], np.array([n], dtype=np.int64), rng)[0]
    cells = np.repeat(np.arange(flat.size, dtype=np.int64), counts)
    rng.shuffle(cells)
    return cells


@register_kind
@dataclass(frozen=True, eq=False)
class JointModel:
    """A full joint probability table over ``attributes`` (the columns with more than one
    value, in domain order); every other column is constant 0. Rows are drawn by
    :func:`sample_cells` with the run's synthesis method (CIPHER)."""

    kind: ClassVar[str] = "joint"
    attributes: tuple[str, ...]
    joint: FloatArray
    synthesis: Literal["round", "sample"]

    def __post_init__(self) -> None:
        object.__setattr__(self, "attributes", tuple(self.attributes))
        object.__setattr__(self, "joint", probabilities(self.joint, "the joint"))
        if self.synthesis not in ("round", "sample"):
            raise ModelError("unknown synthesis method")
        if self.joint.ndim != max(1, len(self.attributes)):
            raise ModelError("the joint needs one axis per attribute")

    @property
    def cells(self) -> int:
        return int(self.joint.size)

    def _check(self, domain: Domain) -> None:
        sizes = tuple(domain.size(a) for a in self.attributes) if self.attributes else (1,)
        if self.joint.shape != sizes:
            raise ModelError("the joint does not match the domain")
        if any(domain.size(a) != 1 for a in domain.attributes if a not in self.attributes):
            raise ModelError("only one-value columns may be left out of the joint")

    def sample(self, domain: Domain, rows: int, rng: np.random.Generator) -> IntArray:
        self._check(domain)
        codes = np.zeros((rows, len(domain)), dtype=np.int64)
        if self.attributes:
            cells = sample_cells(self.joint, rows, self.synthesis, rng)
            coords = np.unravel_index(cells, self.joint.shape)
            for name, values in zip(self.attributes, coords, strict=True):
                codes[:, domain.index(name)] = values
        return codes

    def marginal(self, domain: Domain, attributes: Sequence[str]) -> FloatArray:
        self._check(domain)
        inside = [a for a in attributes if a in self.attributes]
        kept = tuple(i for i, a in enumerate(self.attributes) if a not in inside)
        table = self.joint.sum(axis=kept) if self.attributes else np.ones(())
        order = [a for a in self.attributes if a in inside]
        table = np.transpose(table, [order.index(a) for a in inside])
        return np.asarray(table.reshape([domain.size(a) for a in attributes]), dtype=np.float64)

    def header(self) -> dict[str, Any]:
        return {"attributes": list(self.attributes), "synthesis": self.synthesis}

    def arrays(self) -> dict[str, npt.NDArray[Any]]:
        return {"joint": self.joint}

    @classmethod
    def load(
        cls, domain: Domain, header: Mapping[str, Any], arrays: Mapping[str, npt.NDArray[Any]]
    ) -> JointModel:
        names = _names(header["attributes"], domain, "the joint's columns")
        shape = tuple(domain.size(a) for a in names) if names else (1,)
        joint = check_array(arrays["joint"], "the joint", dtype="float", shape=shape)
        synthesis = header["synthesis"]
        if synthesis not in ("round", "sample"):
            raise ModelError("unknown synthesis method")
        model = cls(names, joint, synthesis)
        model._check(domain)
        return model


@register_kind
@dataclass(frozen=True, eq=False)
class CopulaModel:
    """DPCopula's model: partitions over the ``keys`` columns (all their cells, in C order) with
    weights ``partition_totals``; in each partition a Gaussian copula over the ``copula`` columns
    with ``correlations[p]`` and margins ``margins[j][p]``, whose values are re-ordered by
    ``orders[j]`` (None: identity) as in the run. Rows are allocated to partitions by largest
    remainders, drawn from each copula and shuffled (as in the run).

    ``marginal`` is exact for sets with at most one copula column (with any keys); a set with two
    or more copula columns is estimated from :data:`MARGINAL_SAMPLE_ROWS` rows drawn with the
    fixed seed :data:`MARGINAL_SAMPLE_SEED` (so it is deterministic, with sampling error of order
    1/√200,000 per cell)."""

    kind: ClassVar[str] = "copula"
    keys: tuple[str, ...]
    copula: tuple[str, ...]
    partition_totals: FloatArray
    margins: tuple[FloatArray, ...]
    correlations: FloatArray
    orders: tuple[IntArray | None, ...]

    def __post_init__(self) -> None:
        keys, copula = tuple(self.keys), tuple(self.copula)
        if set(keys) & set(copula):
            raise ModelError("a column is both a key and a copula column")
        totals = check_array(
            self.partition_totals, "the partition totals", dtype="float", nonnegative=True
        )
        n = totals.size
        if totals.ndim != 1 or n == 0:
            raise ModelError("the partition totals are a non-empty vector")
        m = len(copula)
        margins = tuple(
            check_array(mg, "a margin", dtype="float", shape=(n, None), nonnegative=True)
            for mg in self.margins
        )
        if len(margins) != m or len(self.orders) != m:
            raise ModelError("one margin and one order (or None) per copula column")
        correlations = check_array(
            self.correlations, "the correlations", dtype="float", shape=(n, m, m)
        )
        orders: list[IntArray | None] = []
        for margin, order in zip(margins, self.orders, strict=True):
            if order is None:
                orders.append(None)
                continue
            values = check_array(order, "an order", dtype="int", shape=(margin.shape[1],))
            if not np.array_equal(np.sort(values), np.arange(values.size)):
                raise ModelError("an order must be a permutation")
            orders.append(values)
        object.__setattr__(self, "keys", keys)
        object.__setattr__(self, "copula", copula)
        object.__setattr__(self, "partition_totals", totals)
        object.__setattr__(self, "margins", margins)
        object.__setattr__(self, "correlations", correlations)
        object.__setattr__(self, "orders", tuple(orders))

    @property
    def cells(self) -> int:
        return int(
            self.partition_totals.size + sum(m.size for m in self.margins) + self.correlations.size
        )

    def _check(self, domain: Domain) -> None:
        if set(self.keys) | set(self.copula) != set(domain.attributes):
            raise ModelError("keys and copula columns must cover the domain")
        if len(self.keys) + len(self.copula) != len(domain):
            raise ModelError("keys and copula columns must cover the domain once")
        partitions = math.prod(domain.size(a) for a in self.keys)
        if self.partition_totals.size != partitions:
            raise ModelError("one partition per cell of the keys")
        for name, margin in zip(self.copula, self.margins, strict=True):
            if margin.shape[1] != domain.size(name):
                raise ModelError("a margin does not match its column's size")

    def sample(self, domain: Domain, rows: int, rng: np.random.Generator) -> IntArray:
        self._check(domain)
        n_partitions = self.partition_totals.size
        allocation = allocate_rows(self.partition_totals, rows)
        out = np.empty((rows, len(domain)), dtype=np.int64)
        copula_columns = [domain.index(a) for a in self.copula]
        key_columns = [domain.index(a) for a in self.keys]
        key_sizes = [domain.size(a) for a in self.keys]
        start = 0
        for p in range(n_partitions):
            count = int(allocation[p])
            block = slice(start, start + count)
            if self.copula:
                sampled = sample_copula(
                    self.correlations[p], [margin[p] for margin in self.margins], count, rng
                )
                for j, order in enumerate(self.orders):
                    if order is not None:
                        sampled[:, j] = order[sampled[:, j]]
                out[block, copula_columns] = sampled
            if self.keys:
                key_codes = np.unravel_index(p, key_sizes)
                out[block, key_columns] = np.array([int(c) for c in key_codes], dtype=np.int64)
            start += count
        return out[rng.permutation(rows)] if n_partitions > 1 else out

    def marginal(self, domain: Domain, attributes: Sequence[str]) -> FloatArray:
        self._check(domain)
        inside = [a for a in attributes if a in self.copula]
        if len(inside) > 1:
            codes = self.sample(
                domain, MARGINAL_SAMPLE_ROWS, np.random.default_rng(MARGINAL_SAMPLE_SEED)
            )
            return _histogram(codes, domain, attributes)
        weights = probabilities(self.partition_totals, "the partition totals")
        key_sizes = tuple(domain.size(a) for a in self.keys)
        if inside:
            j = self.copula.index(inside[0])
            per_partition = np.array(
                [probabilities(row, "a margin") for row in self.margins[j]]
            )  # (partitions, size) over the re-ordered values
            order = self.orders[j]
            if order is not None:
                original = np.empty_like(per_partition)
                original[:, order] = per_partition
                per_partition = original
            table = (weights[:, None] * per_partition).reshape((*key_sizes, -1))
            names = [*self.keys, inside[0]]
        else:
            table = weights.reshape(key_sizes) if key_sizes else np.ones(())
            names = list(self.keys)
        dropped = tuple(i for i, a in enumerate(names) if a not in attributes)
        table = table.sum(axis=dropped) if dropped else table
        left = [a for a in names if a in attributes]
        return np.asarray(
            np.transpose(table, [left.index(a) for a in attributes]), dtype=np.float64
        )

    def header(self) -> dict[str, Any]:
        return {
            "keys": list(self.keys),
            "copula": list(self.copula),
            "orders": [order is not None for order in self.orders],
        }

    def arrays(self) -> dict[str, npt.NDArray[Any]]:
        out: dict[str, npt.NDArray[Any]] = {
            "partition_totals": self.partition_totals,
            "correlations": self.correlations,
        }
        for j, (margin, order) in enumerate(zip(self.margins, self.orders, strict=True)):
            out[f"margin{j}"] = margin
            if order is not None:
                out[f"order{j}"] = order
        return out

    @classmethod
    def load(
        cls, domain: Domain, header: Mapping[str, Any], arrays: Mapping[str, npt.NDArray[Any]]
    ) -> CopulaModel:
        keys = _names(header["keys"], domain, "the keys")
        copula = _names(header["copula"], domain, "the copula columns")
        flags = header["orders"]
        if not isinstance(flags, list) or len(flags) != len(copula):
            raise ModelError("one order flag per copula column")
        model = cls(
            keys=keys,
            copula=copula,
            partition_totals=arrays["partition_totals"],
            margins=tuple(arrays[f"margin{j}"] for j in range(len(copula))),
            correlations=arrays["correlations"],
            orders=tuple(
                arrays[f"order{j}"] if flag is True else None for j, flag in enumerate(flags)
            ),
        )
        model._check(domain)
        return model


def _setting_ok(annotation: str, value: Any) -> bool:
    if annotation == "bool":
        return isinstance(value, bool)
    if annotation == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation == "float":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, str)  # the Literal choices are checked by GUMSettings


GUM_MARGINAL_ROWS = 20_000
"""Rows GUM synthesises (seed :data:`MARGINAL_SAMPLE_SEED`) to estimate a ``"gum"`` model's
marginals: GUM has no closed-form distribution."""


@register_kind
@dataclass(frozen=True, eq=False)
class GUMModel:
    """PrivSyn's model: the consistent noisy one-way tables and target marginals GUM matches
    (over the compressed domain; attribute positions in domain order), GUM's settings and the
    compression. Sampling re-runs GUM (PrivSyn §7) from these tables with the caller's ``rng``,
    then decodes merged values, exactly as the run did: it costs about what the run's own
    synthesis step cost for the same number of rows.

    GUM is an iterative procedure, not a distribution with closed-form marginals: ``marginal``
    is estimated from :data:`GUM_MARGINAL_ROWS` rows synthesised with the fixed seed
    :data:`MARGINAL_SAMPLE_SEED` (deterministic; sampling error of order 1/√20,000 per cell),
    computed once per model object."""

    kind: ClassVar[str] = "gum"
    compression: Compression
    one_way: tuple[FloatArray, ...]
    targets: tuple[tuple[tuple[int, ...], FloatArray], ...]
    settings: Mapping[str, Any]

    def __post_init__(self) -> None:
        if not isinstance(self.compression, Compression):
            raise ModelError("compression must be a Compression")
        sizes = self.compression.domain.sizes
        one_way = tuple(
            check_array(v, "a one-way table", dtype="float", shape=(size,))
            for v, size in zip(self.one_way, sizes, strict=False)
        )
        if len(one_way) != len(sizes) or len(self.one_way) != len(sizes):
            raise ModelError("one one-way table per attribute")
        targets = []
        for attributes, table in self.targets:
            positions = tuple(int(a) for a in attributes)
            if (
                not positions
                or len(set(positions)) != len(positions)
                or any(not 0 <= a < len(sizes) for a in positions)
            ):
                raise ModelError("a target names unknown or repeated columns")
            shape = tuple(sizes[a] for a in positions)
            targets.append((positions, check_array(table, "a target", dtype="float", shape=shape)))
        raw = dict(self.settings)
        kinds = {f.name: str(f.type) for f in GUMSettings.__dataclass_fields__.values()}
        if set(raw) != set(kinds):
            raise ModelError("GUM settings are incomplete or unknown")
        for name, value in raw.items():
            if not _setting_ok(kinds[name], value):
                raise ModelError(f"GUM setting {name} has the wrong type")
        try:
            settings = GUMSettings(**raw)
        except (TypeError, ValueError) as error:
            raise ModelError(f"bad GUM settings ({error})") from None
        object.__setattr__(self, "one_way", one_way)
        object.__setattr__(self, "targets", tuple(targets))
        object.__setattr__(self, "settings", dict(raw))
        object.__setattr__(self, "_settings", settings)

    @property
    def cells(self) -> int:
        return int(
            sum(v.size for v in self.one_way)
            + sum(t.size for _, t in self.targets)
            + 2 * sum(self.compression.original.sizes)
        )

    def _check(self, domain: Domain) -> None:
        if self.compression.original != domain:
            raise ModelError("the compression does not match the model's domain")

    def sample(self, domain: Domain, rows: int, rng: np.random.Generator) -> CodeArray:
        self._check(domain)
        return self.synthesize(rows, rng)

    def synthesize(
        self, rows: int, rng: np.random.Generator, callback: Callable[[float], None] | None = None
    ) -> CodeArray:
        """:meth:`sample` with GUM's progress ``callback`` (fraction done), as the run uses it."""

        targets = [Target(a, t) for a, t in self.targets]
        small = synthesize_records(
            self.one_way, targets, rows, self.__dict__["_settings"], rng, callback=callback
        )
        return self.compression.decompress_codes(small, rng)

    def marginal(self, domain: Domain, attributes: Sequence[str]) -> FloatArray:
        self._check(domain)
        codes = self.__dict__.get("_marginal_rows")
        if codes is None:
            codes = self.sample(
                domain, GUM_MARGINAL_ROWS, np.random.default_rng(MARGINAL_SAMPLE_SEED)
            )
            self.__dict__["_marginal_rows"] = codes
        return _histogram(codes, domain, attributes)

    def header(self) -> dict[str, Any]:
        return {
            "targets": [list(a) for a, _ in self.targets],
            "settings": dict(self.settings),
        }

    def arrays(self) -> dict[str, npt.NDArray[Any]]:
        out: dict[str, npt.NDArray[Any]] = _compression_arrays(self.compression)
        for j, values in enumerate(self.one_way):
            out[f"one_way{j}"] = values
        for i, (_, table) in enumerate(self.targets):
            out[f"target{i}"] = table
        return out

    @classmethod
    def load(
        cls, domain: Domain, header: Mapping[str, Any], arrays: Mapping[str, npt.NDArray[Any]]
    ) -> GUMModel:
        compression = _load_compression(domain, arrays)
        raw_targets = header["targets"]
        if not isinstance(raw_targets, list) or len(raw_targets) > len(arrays):
            raise ModelError("the model's targets are malformed")
        targets = []
        for i, positions in enumerate(raw_targets):
            if not isinstance(positions, list) or not all(
                isinstance(a, int) and not isinstance(a, bool) for a in positions
            ):
                raise ModelError("a target's columns are positions")
            targets.append((tuple(positions), arrays[f"target{i}"]))
        settings = header["settings"]
        if not isinstance(settings, dict):
            raise ModelError("GUM settings are malformed")
        return cls(
            compression=compression,
            one_way=tuple(arrays[f"one_way{j}"] for j in range(len(domain))),
            targets=tuple(targets),
            settings=settings,
        )
