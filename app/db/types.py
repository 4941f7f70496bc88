"""Exact ρ and δ amounts in the database.

PostgreSQL stores ρ as ``NUMERIC(30, 12)`` and δ as ``NUMERIC(24, 18)``. SQLite has no exact
decimal type (its NUMERIC affinity falls back to floating point), so there ρ is stored as a
64-bit integer count of ``1e-12`` units and δ as a count of ``1e-18`` units. Either way the
guarded ``UPDATE`` and the ``CHECK`` constraints compare exact values, and Python sees
:class:`decimal.Decimal`. (A comparison with a constant other than 0 must be written in units on
SQLite: :func:`delta_sql_constant`.)
"""

from __future__ import annotations

from decimal import Decimal, localcontext
from typing import Any, ClassVar

from sqlalchemy import BigInteger, Numeric, TypeDecorator
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeEngine

RHO_SCALE = 12
RHO_QUANTUM = Decimal(1).scaleb(-RHO_SCALE)

# SQLite stores 1e-12 units in a signed 64-bit integer: ρ must stay below about 9.2e6.
MAX_STORABLE_RHO = Decimal(9_000_000)

# δ is a probability (a dataset's total stays below 1), so 18 decimals fit the same 64-bit
# integer on SQLite with room for sums: 9 · 10^18 < 2^63.
DELTA_SCALE = 18
DELTA_QUANTUM = Decimal(1).scaleb(-DELTA_SCALE)
MAX_STORABLE_DELTA = Decimal(9)


def _quantize_exact(value: Decimal, scale: int, maximum: Decimal, symbol: str) -> Decimal:
    if not value.is_finite() or abs(value) > maximum:
        raise ValueError(f"{symbol} amounts are limited to {maximum}")
    with localcontext() as context:
        context.prec = 40  # 7 integer digits + 18 decimals fit with room to spare
        quantized = value.quantize(Decimal(1).scaleb(-scale))
    if quantized != value:
        raise ValueError(f"{symbol} must have at most {scale} decimal places")
    return quantized


def quantize_rho_exact(value: Decimal) -> Decimal:
    """Return ``value`` on the ledger's 1e-12 grid, refusing any value that would need rounding."""
    return _quantize_exact(value, RHO_SCALE, MAX_STORABLE_RHO, "ρ")


def quantize_delta_exact(value: Decimal) -> Decimal:
    """Return ``value`` on the ledger's 1e-18 δ grid, refusing values that would need rounding."""
    return _quantize_exact(value, DELTA_SCALE, MAX_STORABLE_DELTA, "δ")


def delta_sql_constant(value: Decimal, dialect_name: str) -> str:
    """A δ constant as it must appear in SQL text (a CHECK) on this dialect: units on SQLite."""
    exact = quantize_delta_exact(value)
    if dialect_name == "sqlite":
        return str(int(exact.scaleb(DELTA_SCALE)))
    return format(exact, "f")


class _ExactAmount(TypeDecorator[Decimal]):
    """An exact, non-float amount: NUMERIC on PostgreSQL, integer units on SQLite."""

    impl = Numeric(30, RHO_SCALE, asdecimal=True)
    cache_ok = True
    scale: ClassVar[int]
    precision: ClassVar[int]
    symbol: ClassVar[str]
    maximum: ClassVar[Decimal]

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "sqlite":
            return dialect.type_descriptor(BigInteger())
        return dialect.type_descriptor(Numeric(self.precision, self.scale, asdecimal=True))

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if value is None:
            return None
        if isinstance(value, float):
            raise TypeError(f"{self.symbol} amounts are exact decimals, never floats")
        exact = _quantize_exact(Decimal(value), self.scale, self.maximum, self.symbol)
        if dialect.name == "sqlite":
            return int(exact.scaleb(self.scale))
        return exact

    def process_result_value(self, value: Any, dialect: Dialect) -> Decimal | None:
        if value is None:
            return None
        quantum = Decimal(1).scaleb(-self.scale)
        if dialect.name == "sqlite":
            return Decimal(int(value)).scaleb(-self.scale).quantize(quantum)
        return Decimal(value).quantize(quantum)


class Rho(_ExactAmount):
    """An exact, non-float ρ column (see module docstring)."""

    impl = Numeric(30, RHO_SCALE, asdecimal=True)
    cache_ok = True
    scale = RHO_SCALE
    precision = 30
    symbol = "ρ"
    maximum = MAX_STORABLE_RHO


class Delta(_ExactAmount):
    """An exact, non-float δ column (see module docstring)."""

    impl = Numeric(24, DELTA_SCALE, asdecimal=True)
    cache_ok = True
    scale = DELTA_SCALE
    precision = 24
    symbol = "δ"
    maximum = MAX_STORABLE_DELTA
