"""Attribute domains and integer-encoded datasets.

A :class:`Domain` lists the attributes of a table and the number of categories of each; a
:class:`Dataset` holds the table itself as a 2-D integer array of category codes, one column per
attribute in domain order. Both are frozen and validated at construction, so every function that
receives one can rely on its invariants.

>>> domain = Domain.from_mapping({"sex": 2, "age": 5})
>>> domain.cells()
10
>>> domain.project(["age"]).as_dict()
{'age': 5}
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

CodeArray = npt.NDArray[np.integer[Any]]
"""A table of codes in any integer type (narrow unsigned or int64)."""


# (how many codes a type holds, the type): NumPy's iinfo costs a microsecond or two per call,
# and a loader asks once per column and batch.
_UNSIGNED = (
    (1 << 8, np.dtype(np.uint8)),
    (1 << 16, np.dtype(np.uint16)),
    (1 << 32, np.dtype(np.uint32)),
)
_SIGNED = (
    (1 << 7, np.dtype(np.int8)),
    (1 << 15, np.dtype(np.int16)),
    (1 << 31, np.dtype(np.int32)),
)


def narrowest_unsigned(size: int) -> np.dtype[np.unsignedinteger[Any]]:
    """The narrowest unsigned integer type that holds codes ``0..size-1``."""
    for count, kind in _UNSIGNED:
        if size <= count:
            return kind
    return np.dtype(np.uint64)


def narrowest_signed(size: int) -> np.dtype[np.signedinteger[Any]]:
    """The narrowest signed integer type that holds codes ``0..size-1`` and the refusal codes
    (small negative numbers)."""
    for count, kind in _SIGNED:
        if size <= count:
            return kind
    return np.dtype(np.int64)


@dataclass(frozen=True)
class Domain:
    """Ordered attributes and their category counts (public metadata, never bought with budget)."""

    attributes: tuple[str, ...]
    sizes: tuple[int, ...]

    def __post_init__(self) -> None:
        attributes = tuple(self.attributes)
        sizes = tuple(self.sizes)
        if len(attributes) != len(sizes):
            raise ValueError(
                f"a domain needs one size per attribute: {len(attributes)} attributes, "
                f"{len(sizes)} sizes"
            )
        if not attributes:
            raise ValueError("a domain needs at least one attribute")
        for name in attributes:
            if not isinstance(name, str) or not name:
                raise ValueError("attribute names must be non-empty strings")
        if len(set(attributes)) != len(attributes):
            raise ValueError("attribute names must be unique")
        for name, size in zip(attributes, sizes, strict=True):
            # bool is an int subclass; a size of True would be a silent bug.
            if not isinstance(size, int | np.integer) or isinstance(size, bool) or size < 1:
                raise ValueError(f"attribute {name!r} needs an integer size >= 1")
        object.__setattr__(self, "attributes", attributes)
        object.__setattr__(self, "sizes", tuple(int(size) for size in sizes))

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, int]) -> Domain:
        """Build a domain from ``{attribute: size}``, keeping the mapping's order."""
        return cls(tuple(mapping.keys()), tuple(mapping.values()))

    def index(self, attr: str) -> int:
        """Position of ``attr`` in the domain; ``KeyError`` if it is not an attribute."""
        try:
            return self.attributes.index(attr)
        except ValueError:
            raise KeyError(attr) from None

    def size(self, attr: str) -> int:
        """Number of categories of ``attr``."""
        return self.sizes[self.index(attr)]

    def as_dict(self) -> dict[str, int]:
        """The domain as an ordered ``{attribute: size}`` dict."""
        return dict(zip(self.attributes, self.sizes, strict=True))

    def project(self, attrs: Sequence[str]) -> Domain:
        """The sub-domain of ``attrs``, in the order given."""
        attrs = _checked_subset(self, attrs)
        return Domain(attrs, tuple(self.size(attr) for attr in attrs))

    def cells(self, attrs: Sequence[str] | None = None) -> int:
        """Number of cells of the contingency table over ``attrs`` (all attributes if None)."""
        if attrs is None:
            return math.prod(self.sizes)
        return math.prod(self.size(attr) for attr in _checked_subset(self, attrs))

    @property
    def code_dtype(self) -> np.dtype[np.unsignedinteger[Any]]:
        """The narrowest unsigned type that holds every attribute's codes: how the worker loads
        a table (app/datasets/ingest.py ``read_encoded_table``) and the samplers draw one."""
        return narrowest_unsigned(max(self.sizes, default=1))

    def __len__(self) -> int:
        return len(self.attributes)

    def __contains__(self, attr: object) -> bool:
        return attr in self.attributes

    def __iter__(self) -> Iterator[str]:
        return iter(self.attributes)


def _checked_subset(domain: Domain, attrs: Sequence[str]) -> tuple[str, ...]:
    if isinstance(attrs, str):
        raise TypeError("attrs must be a sequence of attribute names, not a single string")
    attrs = tuple(attrs)
    if len(set(attrs)) != len(attrs):
        raise ValueError("attribute subsets must not repeat an attribute")
    for attr in attrs:
        if attr not in domain:
            raise KeyError(attr)
    return attrs


@dataclass(frozen=True, eq=False)
class Dataset:
    """An integer-encoded table: ``codes[i, j]`` is row i's category of attribute j.

    The array is stored read-only. A writeable input is copied first, so later changes to the
    caller's array cannot break the validated invariants; pass a read-only array to avoid the copy.
    """

    domain: Domain
    codes: npt.NDArray[np.integer[Any]]

    def __post_init__(self) -> None:
        if not isinstance(self.domain, Domain):
            raise TypeError("domain must be a Domain")
        codes = np.asarray(self.codes)
        if codes.ndim != 2:
            raise ValueError(f"codes must be a 2-D array, got {codes.ndim} dimensions")
        if not np.issubdtype(codes.dtype, np.integer):
            raise ValueError(f"codes must have an integer dtype, got {codes.dtype}")
        if codes.shape[1] != len(self.domain):
            raise ValueError(
                f"codes have {codes.shape[1]} columns but the domain has {len(self.domain)}"
            )
        if codes.shape[0] > 0:
            low = codes.min(axis=0)
            high = codes.max(axis=0)
            for j, attr in enumerate(self.domain.attributes):
                # Only the attribute is named: codes can encode private values.
                if low[j] < 0 or high[j] >= self.domain.sizes[j]:
                    raise ValueError(
                        f"column {attr!r} has codes outside 0..{self.domain.sizes[j] - 1}"
                    )
        if codes.flags.writeable:
            if codes is self.codes:
                codes = codes.copy()
            codes.flags.writeable = False
        object.__setattr__(self, "codes", codes)

    @property
    def n_rows(self) -> int:
        """Number of records (the quantity neighbouring datasets differ in by one)."""
        return int(self.codes.shape[0])

    def column(self, attr: str) -> npt.NDArray[np.integer[Any]]:
        """The (read-only) code column of ``attr``."""
        return self.codes[:, self.domain.index(attr)]

    def counts(self, attribute_sets: Sequence[Sequence[str]]) -> list[npt.NDArray[np.int64]]:
        """The exact contingency table of each attribute tuple (the numpy
        :class:`~engine.counting.CountingEngine`: :func:`engine.marginals.count_marginal`)."""
        from engine.marginals import count_marginal  # engine.marginals imports this module

        return [count_marginal(self, attrs) for attrs in attribute_sets]
