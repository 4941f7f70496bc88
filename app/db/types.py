"""Exact ρ amounts in the database.

PostgreSQL stores ρ as ``NUMERIC(30, 12)``. SQLite has no exact decimal type (its NUMERIC
affinity falls back to floating point), so there ρ is stored as a 64-bit integer count of
``1e-12`` units. Either way the guarded ``UPDATE`` and the ``CHECK`` constraints compare exact
values, and Python sees :class:`decimal.Decimal`.
"""

from __future__ import annotations

from decimal import Decimal, localcontext
from typing import Any

from sqlalchemy import BigInteger, Numeric, TypeDecorator
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeEngine

RHO_SCALE = 12
RHO_QUANTUM = Decimal(1).scaleb(-RHO_SCALE)
_UNITS_PER_RHO = 10**RHO_SCALE


# SQLite stores 1e-12 units in a signed 64-bit integer: ρ must stay below about 9.2e6.
MAX_STORABLE_RHO = Decimal(9_000_000)


def quantize_rho_exact(value: Decimal) -> Decimal:
    """Return ``value`` on the ledger's 1e-12 grid, refusing any value that would need rounding."""
    if not value.is_finite() or abs(value) > MAX_STORABLE_RHO:
        raise ValueError(f"ρ amounts are limited to {MAX_STORABLE_RHO}")
    with localcontext() as context:
        context.prec = 40  # 7 integer digits + 12 decimals fit with room to spare
        quantized = value.quantize(RHO_QUANTUM)
    if quantized != value:
        raise ValueError(f"ρ must have at most {RHO_SCALE} decimal places")
    return quantized


class Rho(TypeDecorator[Decimal]):
    """An exact, non-float ρ column (see module docstring)."""

    impl = Numeric(30, RHO_SCALE, asdecimal=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "sqlite":
            return dialect.type_descriptor(BigInteger())
        return dialect.type_descriptor(Numeric(30, RHO_SCALE, asdecimal=True))

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if value is None:
            return None
        if isinstance(value, float):
            raise TypeError("ρ amounts are exact decimals, never floats")
        exact = quantize_rho_exact(Decimal(value))
        if dialect.name == "sqlite":
            return int(exact.scaleb(RHO_SCALE))
        return exact

    def process_result_value(self, value: Any, dialect: Dialect) -> Decimal | None:
        if value is None:
            return None
        if dialect.name == "sqlite":
            return Decimal(int(value)).scaleb(-RHO_SCALE).quantize(RHO_QUANTUM)
        return Decimal(value).quantize(RHO_QUANTUM)
