"""A seeded run of a method and a digest of everything it released (shared by the counting
tests; runs unchanged on main's tree, which is how the pinned digests were made)."""

from __future__ import annotations

import hashlib
import json
import random
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.domain import Dataset, Domain
from engine.mechanisms import MECHANISMS
from engine.mechanisms.base import SynthesisResult

if TYPE_CHECKING:  # main's tree before issue 29 has no engine.counting
    from engine.counting import CountingEngine

DOMAIN = Domain.from_mapping({"sex": 2, "age": 6, "region": 4, "flag": 1, "job": 5})
ROWS = 500
OUTPUT_ROWS = 300
RHO = Fraction(1, 2)


def seeded_dataset(seed: int = 29) -> Dataset:
    """Skewed, correlated codes over :data:`DOMAIN` from a seeded Generator."""
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 2, ROWS)
    columns = []
    for size in DOMAIN.sizes:
        noise = rng.integers(0, size, ROWS)
        columns.append(np.where(rng.random(ROWS) < 0.6, (base * (size - 1)) % size, noise))
    return Dataset(DOMAIN, np.column_stack(columns).astype(np.int64))


def seeded_run(name: str, data: Dataset | CountingEngine) -> SynthesisResult:
    mechanism = MECHANISMS[name]
    return mechanism.run(
        data,  # type: ignore[arg-type]  # a Dataset on main's tree
        RHO,
        mechanism.validate_params({}),
        rng=np.random.default_rng(7),
        rows=OUTPUT_ROWS,
        noise_source=random.Random(11),
    )


def _plain(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return [str(value.dtype), list(value.shape), hashlib.sha256(value.tobytes()).hexdigest()]
    if isinstance(value, Fraction):
        return str(value)
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return repr(value)


def release_digest(result: SynthesisResult) -> str:
    """SHA-256 over the synthetic codes, every measurement, selection and release, the ρ used
    and the total estimate (what reaches the release and the ledger)."""
    codes = np.ascontiguousarray(result.codes)
    facts = {
        "codes": _plain(codes),
        "measurements": [
            [
                list(m.attributes),
                _plain(m.noisy_counts),
                str(m.sigma2),
                str(m.sensitivity),
                str(m.rho),
            ]
            for m in result.measurements
        ],
        "selections": [repr(s) for s in result.selections],
        "releases": [repr(r) for r in result.releases],
        "rho_used": str(result.rho_used),
        "rho_spent": str(result.rho_spent),
        "estimated_total": repr(result.estimated_total),
        "extra": _plain(dict(result.extra)),
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()


if __name__ == "__main__":
    data = seeded_dataset()
    print({name: release_digest(seeded_run(name, data)) for name in MECHANISMS})
