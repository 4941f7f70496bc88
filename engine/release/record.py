"""The record of one release: everything a mechanism released, as data (post-processing only).

A :class:`ReleaseRecord` holds the noisy marginals a run measured (with the map from each of
their axes to the original domain's codes, since MST-style compression measures merged codes),
and the privacy charges of its other releases (exponential-mechanism selections, noisy score
vectors). All of it was released by the DP mechanism and paid for; nothing in it is computed from
the data afterwards, so it can be stored, shown to analysts and used to build reports at no
further privacy cost. The charges add up to the job's ρ exactly (checked here), as the ledger
charged it (privacy rule 4).

Serialised as an ``.npz`` archive with a JSON header; loading never unpickles
(``allow_pickle=False``), so a tampered file cannot run code.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from engine.domain import Domain

IntArray = npt.NDArray[np.int64]

FORMAT_VERSION = 1
_HEADER = "record.json"


class RecordError(ValueError):
    """A release record is malformed (or its file is not a record)."""


def _fraction_text(value: Fraction) -> str:
    return f"{value.numerator}/{value.denominator}"


def _parse_fraction(text: Any, what: str) -> Fraction:
    if not isinstance(text, str):
        raise RecordError(f"{what} must be a fraction written as text")
    try:
        value = Fraction(text)
    except (ValueError, ZeroDivisionError):
        raise RecordError(f"{what} is not a fraction") from None
    return value


def _frozen(array: npt.ArrayLike, what: str) -> IntArray:
    values = np.asarray(array)
    if not np.issubdtype(values.dtype, np.integer):
        raise RecordError(f"{what} must be integers")
    out = values.astype(np.int64, copy=True)
    out.flags.writeable = False
    return out


@dataclass(frozen=True, eq=False)
class MeasuredMarginal:
    """One noisy contingency table: ``noisy_counts`` (one axis per attribute) with independent
    discrete Gaussian noise of variance ``sigma2`` per cell, costing ``rho``.

    ``axis_maps[j]`` maps attribute j's original codes (``0..size-1`` of the domain) to the index
    along axis j that counted them; ``None`` means the identity (the axis has the attribute's
    full size). A compressed axis is shorter: several original codes share one measured cell.
    """

    attributes: tuple[str, ...]
    noisy_counts: IntArray
    sigma2: Fraction
    rho: Fraction
    axis_maps: tuple[IntArray | None, ...] = ()

    def __post_init__(self) -> None:
        attributes = tuple(self.attributes)
        if not attributes or len(set(attributes)) != len(attributes):
            raise RecordError("a measured marginal needs distinct attributes")
        counts = _frozen(self.noisy_counts, "noisy counts")
        if counts.ndim != len(attributes):
            raise RecordError("noisy counts need one axis per attribute")
        maps = tuple(self.axis_maps) or (None,) * len(attributes)
        if len(maps) != len(attributes):
            raise RecordError("one axis map (or None) per attribute")
        frozen_maps: list[IntArray | None] = []
        for axis, mapping in enumerate(maps):
            if mapping is None:
                frozen_maps.append(None)
                continue
            values = _frozen(mapping, "an axis map")
            if values.ndim != 1 or values.size == 0:
                raise RecordError("an axis map is a non-empty vector")
            if values.min() < 0 or values.max() >= counts.shape[axis]:
                raise RecordError("an axis map points outside its axis")
            frozen_maps.append(values)
        for name in ("sigma2", "rho"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, Fraction | int) or value <= 0:
                raise RecordError(f"{name} must be a positive exact fraction")
            object.__setattr__(self, name, Fraction(value))
        object.__setattr__(self, "attributes", attributes)
        object.__setattr__(self, "noisy_counts", counts)
        object.__setattr__(self, "axis_maps", tuple(frozen_maps))

    @property
    def sigma(self) -> float:
        return math.sqrt(float(self.sigma2))

    def check_domain(self, domain: Domain) -> None:
        """Raise :class:`RecordError` unless every axis fits ``domain``."""
        for axis, (name, mapping) in enumerate(zip(self.attributes, self.axis_maps, strict=True)):
            if name not in domain.attributes:
                raise RecordError(f"a measurement names an unknown column {name!r}")
            size = domain.size(name)
            if mapping is None and self.noisy_counts.shape[axis] != size:
                raise RecordError(f"a measurement of {name!r} does not match its domain size")
            if mapping is not None and mapping.size != size:
                raise RecordError(f"an axis map of {name!r} does not match its domain size")

    def groups(self, axis: int) -> list[list[int]]:
        """For each measured index along ``axis``, the original codes it counted."""
        mapping = self.axis_maps[axis]
        length = self.noisy_counts.shape[axis]
        if mapping is None:
            return [[code] for code in range(length)]
        out: list[list[int]] = [[] for _ in range(length)]
        for code, index in enumerate(mapping.tolist()):
            out[index].append(code)
        return out


@dataclass(frozen=True)
class Charge:
    """A release that is not a stored table: an exponential-mechanism selection (``kind``
    ``"selection"``, with its ε) or a noisy vector of scores (``"release"``, with its σ²), with its
    ρ and L2 sensitivity. Their values steered the run; they are not kept."""

    kind: str
    description: str
    rho: Fraction
    sensitivity: float
    epsilon: float | None = None
    sigma2: Fraction | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("selection", "release"):
            raise RecordError("a charge is a selection or a release")
        if isinstance(self.rho, bool) or not isinstance(self.rho, Fraction | int) or self.rho <= 0:
            raise RecordError("a charge's rho must be a positive exact fraction")
        object.__setattr__(self, "rho", Fraction(self.rho))
        if self.sigma2 is not None:
            object.__setattr__(self, "sigma2", Fraction(self.sigma2))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind,
            "description": self.description,
            "rho": _fraction_text(self.rho),
            "sensitivity": self.sensitivity,
        }
        if self.epsilon is not None:
            out["epsilon"] = self.epsilon
        if self.sigma2 is not None:
            out["sigma2"] = _fraction_text(self.sigma2)
        return out

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Charge:
        sigma2 = raw.get("sigma2")
        return cls(
            kind=str(raw["kind"]),
            description=str(raw["description"]),
            rho=_parse_fraction(raw["rho"], "a charge's rho"),
            sensitivity=float(raw["sensitivity"]),
            epsilon=None if raw.get("epsilon") is None else float(raw["epsilon"]),
            sigma2=None if sigma2 is None else _parse_fraction(sigma2, "a charge's sigma2"),
        )


@dataclass(frozen=True, eq=False)
class ReleaseRecord:
    """Everything one run released: its noisy marginals and its other charges, which add up to
    ``rho`` exactly; ``estimated_total`` is the mechanism's noisy row count N̂ (a DP estimate)."""

    method: str
    params: Mapping[str, Any]
    rho: Fraction
    domain: Domain
    estimated_total: float
    marginals: tuple[MeasuredMarginal, ...]
    charges: tuple[Charge, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)
    """JSON-able public facts about the run (e.g. the model's cliques), for reports."""

    def __post_init__(self) -> None:
        if isinstance(self.rho, bool) or not isinstance(self.rho, Fraction | int) or self.rho <= 0:
            raise RecordError("rho must be a positive exact fraction")
        object.__setattr__(self, "rho", Fraction(self.rho))
        object.__setattr__(self, "marginals", tuple(self.marginals))
        object.__setattr__(self, "charges", tuple(self.charges))
        object.__setattr__(self, "params", json.loads(json.dumps(dict(self.params))))
        object.__setattr__(self, "extra", json.loads(json.dumps(dict(self.extra))))
        total = float(self.estimated_total)
        if not (math.isfinite(total) and total >= 0):
            raise RecordError("estimated_total must be finite and non-negative")
        object.__setattr__(self, "estimated_total", total)
        for marginal in self.marginals:
            marginal.check_domain(self.domain)
        spent = sum((m.rho for m in self.marginals), Fraction(0)) + sum(
            (c.rho for c in self.charges), Fraction(0)
        )
        if spent != self.rho:
            raise RecordError(f"the record's releases add up to ρ = {spent}, not {self.rho}")

    def share(self, rho: Fraction) -> float:
        """``rho`` as a share of the run's ρ."""
        return float(rho / self.rho)

    def to_bytes(self) -> bytes:
        header = {
            "version": FORMAT_VERSION,
            "method": self.method,
            "params": self.params,
            "rho": _fraction_text(self.rho),
            "domain": {
                "attributes": list(self.domain.attributes),
                "sizes": list(self.domain.sizes),
            },
            "estimated_total": self.estimated_total,
            "marginals": [
                {
                    "attributes": list(m.attributes),
                    "sigma2": _fraction_text(m.sigma2),
                    "rho": _fraction_text(m.rho),
                    "maps": [mapping is not None for mapping in m.axis_maps],
                }
                for m in self.marginals
            ],
            "charges": [c.to_json() for c in self.charges],
            "extra": self.extra,
        }
        arrays: dict[str, IntArray] = {}
        for i, m in enumerate(self.marginals):
            arrays[f"m{i}"] = m.noisy_counts
            for axis, mapping in enumerate(m.axis_maps):
                if mapping is not None:
                    arrays[f"m{i}_{axis}"] = mapping
        text = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
        buffer = io.BytesIO()
        np.savez_compressed(buffer, **{_HEADER: text}, **arrays)  # type: ignore[arg-type]
        return buffer.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> ReleaseRecord:
        try:
            with np.load(io.BytesIO(data), allow_pickle=False) as archive:
                header = json.loads(bytes(archive[_HEADER]).decode())
                if header.get("version") != FORMAT_VERSION:
                    raise RecordError("unknown release record version")
                domain = Domain(
                    tuple(header["domain"]["attributes"]), tuple(header["domain"]["sizes"])
                )
                marginals = []
                for i, raw in enumerate(header["marginals"]):
                    maps = tuple(
                        archive[f"m{i}_{axis}"] if present else None
                        for axis, present in enumerate(raw["maps"])
                    )
                    marginals.append(
                        MeasuredMarginal(
                            attributes=tuple(raw["attributes"]),
                            noisy_counts=archive[f"m{i}"],
                            sigma2=_parse_fraction(raw["sigma2"], "sigma2"),
                            rho=_parse_fraction(raw["rho"], "rho"),
                            axis_maps=maps,
                        )
                    )
        except RecordError:
            raise
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise RecordError(f"not a release record ({type(error).__name__})") from None
        return cls(
            method=str(header["method"]),
            params=header["params"],
            rho=_parse_fraction(header["rho"], "rho"),
            domain=domain,
            estimated_total=float(header["estimated_total"]),
            marginals=tuple(marginals),
            charges=tuple(Charge.from_json(c) for c in header["charges"]),
            extra=header.get("extra", {}),
        )
