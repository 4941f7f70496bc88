"""The fitted model a run leaves behind: more rows can be drawn from it at no privacy cost.

A :class:`FittedModel` is what a mechanism's synthetic rows were drawn from (a graphical model's
potentials, one-way probabilities, a copula, a reconstructed joint), together with the public
re-coding it needs to give codes of the original domain. Drawing rows from it, or reading its
marginals, is post-processing.

Privacy claim: a model holds only DP outputs and public information: quantities computed from
the run's noisy measurements (potentials fitted to noisy marginals, clipped and normalised noisy
counts, correlations estimated from noisy releases), compression supports and decompression
weights computed from noisy one-way counts, the declared domain and the params. Nothing in it was
read from the data after the charge, so storing it, showing it and sampling from it cost no ρ.

Each method's model is a *kind* (``"independent"``, ``"graphical"``, ``"joint"``, ``"copula"``,
``"gum"``): a class implementing :class:`ModelKind`, registered with :func:`register_kind`. The
kinds live in :mod:`engine.models.kinds`, which ``import engine.models`` loads after this module;
below the mechanisms that fit them and the release package that stores them.

Serialised as an ``.npz`` archive with a JSON header and a version number; loading never unpickles
(``allow_pickle=False``) and validates every array, so a corrupted or tampered file raises
:class:`ModelError` rather than failing later inside numpy.

Re-sampling: the same model, row count and seed give exactly the same codes. A re-sample with the
original job's row count and seed need NOT reproduce the job's output: the job may have drawn
its rows from the model in memory along a different route (e.g. a junction tree rebuilt from the
stored potentials can order the attributes differently).
"""

from __future__ import annotations

import io
import json
import math
import zipfile
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from engine.domain import Domain

FORMAT_VERSION = 1
_HEADER = "model.json"
_MAX_HEADER_BYTES = 16 * 2**20

IntArray = npt.NDArray[np.int64]
CodeArray = npt.NDArray[np.integer[Any]]
FloatArray = npt.NDArray[np.float64]


class ModelError(ValueError):
    """A fitted model is malformed (or its file is not a model)."""


@runtime_checkable
class ModelKind(Protocol):
    """One kind of fitted model: what :class:`FittedModel` delegates to.

    ``sample`` and ``marginal`` work in the ORIGINAL domain (codes ``0..size-1`` of every
    attribute); ``header`` (JSON-able) and ``arrays`` (numeric arrays, no objects) are what
    ``load`` rebuilds the kind from, validating both.
    """

    kind: ClassVar[str]

    @property
    def cells(self) -> int:
        """The model's size in numbers held (bounds the work of sampling per row)."""
        ...

    def sample(self, domain: Domain, rows: int, rng: np.random.Generator) -> CodeArray: ...

    def marginal(self, domain: Domain, attributes: Sequence[str]) -> FloatArray: ...

    def header(self) -> dict[str, Any]: ...

    def arrays(self) -> dict[str, npt.NDArray[Any]]: ...

    @classmethod
    def load(
        cls, domain: Domain, header: Mapping[str, Any], arrays: Mapping[str, npt.NDArray[Any]]
    ) -> ModelKind: ...


_KINDS: dict[str, type[ModelKind]] = {}
# Filled by engine.models.kinds, which engine/models/__init__.py imports right after this module:
# importing this module imports its package first, so every kind is registered before a load.


def register_kind(kind: type[ModelKind]) -> type[ModelKind]:
    """Class decorator: make ``kind`` loadable by its ``kind`` name."""
    name = kind.kind
    if name in _KINDS and _KINDS[name] is not kind:
        raise ValueError(f"model kind {name!r} is registered twice")
    _KINDS[name] = kind
    return kind


def check_array(
    value: Any,
    what: str,
    *,
    dtype: str,
    shape: tuple[int | None, ...] | None = None,
    nonnegative: bool = False,
) -> npt.NDArray[Any]:
    """``value`` as a read-only array of ``dtype`` kind (``"int"``, ``"float"``, ``"bool"``),
    finite, of ``shape`` (None = any length on that axis) and non-negative when asked;
    :class:`ModelError` otherwise. Used on every array a model file holds."""
    array = np.asarray(value)
    if array.dtype == object:
        raise ModelError(f"{what} must be numeric")
    expected = {
        "int": np.integer,
        "float": np.floating,
        "bool": np.bool_,
    }[dtype]
    if dtype == "float" and np.issubdtype(array.dtype, np.integer):
        array = array.astype(np.float64)
    if not np.issubdtype(array.dtype, expected):
        raise ModelError(f"{what} must be {dtype} values")
    if shape is not None and (
        array.ndim != len(shape)
        or any(n is not None and n != size for n, size in zip(shape, array.shape, strict=True))
    ):
        raise ModelError(f"{what} has shape {array.shape}, expected {shape}")
    if dtype == "float":
        array = array.astype(np.float64, copy=False)
        if not np.all(np.isfinite(array)):
            raise ModelError(f"{what} must be finite")
    elif dtype == "int":
        array = array.astype(np.int64, copy=False)
    if nonnegative and array.size and array.min() < 0:
        raise ModelError(f"{what} must be non-negative")
    out = array.copy()
    out.flags.writeable = False
    return out


def probabilities(counts: npt.ArrayLike, what: str) -> FloatArray:
    """Non-negative counts normalised to sum to 1 (uniform if they sum to 0)."""
    values = check_array(counts, what, dtype="float", nonnegative=True)
    if values.size == 0:
        raise ModelError(f"{what} is empty")
    total = float(values.sum())
    out = values / total if total > 0 else np.full(values.shape, 1.0 / values.size)
    out.flags.writeable = False
    return out


@dataclass(frozen=True, eq=False)
class FittedModel:
    """The re-samplable model of one run (see the module docstring for the privacy claim).

    ``domain`` is the ORIGINAL domain of the dataset; ``estimated_total`` the mechanism's noisy
    row count N̂; ``body`` the kind-specific model (:class:`ModelKind`).
    """

    method: str
    domain: Domain
    estimated_total: float
    body: ModelKind

    def __post_init__(self) -> None:
        if not isinstance(self.method, str) or not self.method:
            raise ModelError("a model names its method")
        if not isinstance(self.domain, Domain):
            raise ModelError("domain must be a Domain")
        try:
            total = float(self.estimated_total)
        except (TypeError, ValueError):
            raise ModelError("estimated_total must be a number") from None
        if not (math.isfinite(total) and total >= 0):
            raise ModelError("estimated_total must be finite and non-negative")
        if not isinstance(self.body, ModelKind) or self.body.kind not in _KINDS:
            raise ModelError("body must be a registered model kind")
        object.__setattr__(self, "estimated_total", total)

    @property
    def kind(self) -> str:
        return self.body.kind

    @property
    def cells(self) -> int:
        """The model's size: numbers held by its kind (the service bounds sampling jobs by it)."""
        return int(self.body.cells)

    def sample(self, rows: int, rng: np.random.Generator) -> CodeArray:
        """``rows`` × len(domain) codes in the original domain (post-processing only), in the
        narrowest unsigned type that holds the largest attribute's codes (a byte per cell for
        most tables; callers that do arithmetic on them widen a column at a time). The same
        model, ``rows`` and ``rng`` state give exactly the same codes."""
        if isinstance(rows, bool) or not isinstance(rows, int | np.integer) or rows < 0:
            raise ValueError("rows must be a non-negative int")
        if not isinstance(rng, np.random.Generator):
            raise TypeError("rng must be a numpy Generator")
        drawn = self.body.sample(self.domain, int(rows), rng)
        if drawn.shape != (int(rows), len(self.domain)):
            raise RuntimeError(f"a {self.kind} model drew codes of shape {drawn.shape}")
        sizes = np.asarray(self.domain.sizes)
        if rows and (drawn.min() < 0 or np.any(drawn.max(axis=0) >= sizes)):
            raise RuntimeError(f"a {self.kind} model drew codes outside the domain")
        # Checked before the cast, which would wrap a code past the type.
        codes: CodeArray = np.asarray(drawn, dtype=self.domain.code_dtype)
        return codes

    def marginal(self, attributes: Sequence[str]) -> FloatArray:
        """The model's probability table over the original codes of ``attributes`` (axes in the
        order given; sums to 1). Exact for every kind but ``"copula"``, whose multi-attribute
        marginals are estimated from a fixed-seed sample (see its docstring)."""
        if isinstance(attributes, str):
            raise TypeError("attributes must be a sequence of names, not a single string")
        names = tuple(attributes)
        if not names or len(set(names)) != len(names):
            raise ValueError("attributes must be distinct and at least one")
        for name in names:
            if name not in self.domain.attributes:
                raise KeyError(name)
        table = np.asarray(self.body.marginal(self.domain, names), dtype=np.float64)
        expected = tuple(self.domain.size(name) for name in names)
        if table.shape != expected:
            raise RuntimeError(f"a {self.kind} marginal has shape {table.shape}, not {expected}")
        table = np.clip(table, 0.0, None)
        total = float(table.sum())
        return table / total if total > 0 else np.full(expected, 1.0 / table.size)

    # --- serialisation ------------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        header = {
            "version": FORMAT_VERSION,
            "kind": self.kind,
            "method": self.method,
            "domain": {
                "attributes": list(self.domain.attributes),
                "sizes": list(self.domain.sizes),
            },
            "estimated_total": self.estimated_total,
            "body": self.body.header(),
        }
        arrays = self.body.arrays()
        if _HEADER in arrays:
            raise RuntimeError("a model kind used the header's name for an array")
        text = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
        buffer = io.BytesIO()
        np.savez_compressed(buffer, **{_HEADER: text}, **arrays)  # type: ignore[arg-type]
        return buffer.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> FittedModel:
        """The model :meth:`to_bytes` wrote; :class:`ModelError` for anything else."""
        kinds = _KINDS
        try:
            with np.load(io.BytesIO(data), allow_pickle=False) as archive:
                names = set(archive.files)
                if _HEADER not in names:
                    raise ModelError("not a model file (no header)")
                raw = archive[_HEADER]
                if raw.dtype != np.uint8 or raw.ndim != 1 or raw.size > _MAX_HEADER_BYTES:
                    raise ModelError("the model header is malformed")
                header = json.loads(bytes(raw).decode())
                if not isinstance(header, dict) or header.get("version") != FORMAT_VERSION:
                    raise ModelError("unknown model file version")
                kind = kinds.get(header.get("kind"))  # type: ignore[arg-type]
                if kind is None:
                    raise ModelError("unknown model kind")
                raw_domain = header["domain"]
                domain = Domain(
                    tuple(str(a) for a in raw_domain["attributes"]),
                    tuple(int(s) for s in raw_domain["sizes"]),
                )
                arrays = {name: archive[name] for name in names if name != _HEADER}
                body_header = header["body"]
                if not isinstance(body_header, dict):
                    raise ModelError("the model header is malformed")
                body = kind.load(domain, body_header, arrays)
                if set(body.arrays()) != set(arrays):
                    raise ModelError("the model file holds arrays its model does not use")
                return cls(
                    method=str(header["method"]),
                    domain=domain,
                    estimated_total=float(header["estimated_total"]),
                    body=body,
                )
        except ModelError:
            raise
        except (
            OSError,
            ValueError,
            KeyError,
            TypeError,
            IndexError,
            EOFError,
            MemoryError,
            zipfile.BadZipFile,
            zlib.error,
        ) as error:
            raise ModelError(f"not a valid model file ({type(error).__name__})") from None


__all__ = [
    "FORMAT_VERSION",
    "FittedModel",
    "ModelError",
    "ModelKind",
    "check_array",
    "probabilities",
    "register_kind",
    "resolve_rows",
]


def resolve_rows(rows: int | None, estimated_total: float, max_rows: int | None = None) -> int:
    """Rows to synthesise: ``rows`` if given, else max(1, round(N̂)) from the noisy total N̂,
    capped at ``max_rows`` when one is set (a service limit; post-processing).

    Never the true row count: that would release it without noise.
    """
    count = rows if rows is not None else max(1, round(estimated_total))
    return count if max_rows is None else min(count, max_rows)
