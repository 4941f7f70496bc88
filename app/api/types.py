"""Shared wire types: exact ρ amounts travel as decimal strings."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, PlainSerializer

from app.db.types import RHO_SCALE


def format_decimal(value: Decimal) -> str:
    """Plain notation, no exponent, no trailing zeros: Decimal('0.500000000000') -> '0.5'."""
    if value == 0:
        return "0"
    text = format(value.normalize(), "f")
    return text


def _parse_decimal(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("expected a decimal number")
    if isinstance(value, float | int | str):
        try:
            parsed = Decimal(str(value).strip())
        except InvalidOperation:
            raise ValueError("expected a decimal number") from None
        if not parsed.is_finite():
            raise ValueError("expected a finite decimal number")
        return parsed
    return value


def _max_scale(value: Decimal) -> Decimal:
    exponent = value.normalize().as_tuple().exponent
    if isinstance(exponent, int) and -exponent > RHO_SCALE:
        raise ValueError(f"ρ amounts have at most {RHO_SCALE} decimal places")
    return value


RhoOut = Annotated[
    Decimal,
    PlainSerializer(format_decimal, return_type=str, when_used="json"),
    Field(json_schema_extra={"type": "string", "format": "decimal"}),
]

RhoIn = Annotated[
    Decimal,
    BeforeValidator(_parse_decimal),
    Field(gt=0, description="a positive decimal ρ (zCDP), as a JSON number or string"),
]

DecimalIn = Annotated[Decimal, BeforeValidator(_parse_decimal)]


def check_rho_scale(value: Decimal) -> Decimal:
    return _max_scale(value)
