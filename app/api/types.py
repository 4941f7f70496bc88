"""Shared wire types: exact ρ and δ amounts travel as decimal strings."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, PlainSerializer, WithJsonSchema

from app.db.types import DELTA_SCALE, RHO_SCALE


def format_decimal(value: Decimal) -> str:
    """Plain notation, no exponent, no trailing zeros: Decimal('0.500000000000') -> '0.5'."""
    if value == 0:
        return "0"
    text = format(value.normalize(), "f")
    return text


_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def format_scientific(value: Decimal) -> str:
    """Exact, for people: plain between 0.001 and 10000, else m × 10ⁿ with every digit kept
    (Decimal('0.000000999999999999') -> '9.99999999999 × 10⁻⁷', Decimal('4E-18') ->
    '4 × 10⁻¹⁸'), up to the 28 significant digits of the default decimal context."""
    if value == 0:
        return "0"
    exponent = value.adjusted()
    if -3 <= exponent < 4:
        return format_decimal(value)
    mantissa = format_decimal(value.scaleb(-exponent))
    return f"{mantissa} × 10{str(exponent).translate(_SUPERSCRIPT)}"


MAX_DECIMAL_EXPONENT = 1000


def parse_decimal(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("expected a decimal number")
    if isinstance(value, float | int | str):
        try:
            parsed = Decimal(str(value).strip())
        except InvalidOperation:
            raise ValueError("expected a decimal number") from None
        if not parsed.is_finite():
            raise ValueError("expected a finite decimal number")
        if parsed and not -MAX_DECIMAL_EXPONENT <= parsed.adjusted() <= MAX_DECIMAL_EXPONENT:
            # e.g. "1e999999999": arithmetic on it would overflow the decimal context.
            raise ValueError("the number is out of range")
        return parsed
    return value


def _max_scale(value: Decimal, scale: int = RHO_SCALE, symbol: str = "ρ") -> Decimal:
    # parse_decimal bounded the exponent, so normalize() cannot over- or underflow here.
    exponent = value.normalize().as_tuple().exponent
    if isinstance(exponent, int) and -exponent > scale:
        raise ValueError(f"{symbol} amounts have at most {scale} decimal places")
    return value


RhoOut = Annotated[
    Decimal,
    PlainSerializer(format_decimal, return_type=str, when_used="json"),
    Field(json_schema_extra={"type": "string", "format": "decimal"}),
]

DECIMAL_PATTERN = r"^[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$"


def decimal_json_schema(
    description: str,
    *,
    minimum: float | Decimal = 0,
    maximum: float | None = None,
    below: float | None = None,
    zero_allowed: bool = False,
) -> WithJsonSchema:
    """The documented form of a decimal input: a JSON number (bounded) or its decimal text.

    ``minimum`` 0 means positive (exclusive) unless ``zero_allowed``."""
    number: dict[str, Any] = (
        {"type": "number", "exclusiveMinimum": 0}
        if minimum == 0 and not zero_allowed
        else {"type": "number", "minimum": float(minimum)}
    )
    if maximum is not None:
        number["maximum"] = maximum
    if below is not None:
        number["exclusiveMaximum"] = below
    return WithJsonSchema(
        {
            "anyOf": [number, {"type": "string", "pattern": DECIMAL_PATTERN}],
            "description": description,
        }
    )


RhoIn = Annotated[
    Decimal,
    BeforeValidator(parse_decimal),
    Field(gt=0),
    decimal_json_schema("a positive decimal ρ (zCDP) with at most 12 decimal places"),
]

DecimalIn = Annotated[Decimal, BeforeValidator(parse_decimal)]

RHO_TAG = "rho"
EPSILON_DELTA_TAG = "epsilon_delta"
UNION_TAGS = frozenset({RHO_TAG, EPSILON_DELTA_TAG})
"""The tags of the wire's tagged unions (a job's budget: ``rho`` or ``epsilon_delta``, see
app/jobs/schemas.py). Pydantic puts the tag into each error's location
(``budget.epsilon_delta.delta``); :func:`public_location` leaves it out."""


def public_location(location: Any) -> list[Any]:
    """An error's location as the client wrote it: the union tags left out."""
    parts = list(location) if isinstance(location, (list, tuple)) else [location]
    return [
        part
        for index, part in enumerate(parts)
        if not (index > 0 and part in UNION_TAGS and parts[index - 1] == "budget")
    ]


MAX_DELTA = Decimal("0.001")
"""The largest δ any request may give (a job's (ε, δ) budget, an upload's ``budget_delta``, a
grant's ``add_delta``): a δ near 1 states no privacy at all, and δ should be far below 1/n
(issue 24 §11: δ = 0.9999999999999999 was accepted)."""

# δ of approximate zCDP (spent by discovery at upload): 0 ≤ δ ≤ MAX_DELTA, at most 18 decimal
# places.
DeltaOut = RhoOut
DeltaIn = Annotated[
    Decimal,
    BeforeValidator(parse_decimal),
    Field(ge=0, le=MAX_DELTA),
    decimal_json_schema(
        "a decimal δ, 0 ≤ δ ≤ 0.001, with at most 18 decimal places",
        maximum=float(MAX_DELTA),
        zero_allowed=True,
    ),
]


def check_rho_scale(value: Decimal) -> Decimal:
    return _max_scale(value)


def check_delta_scale(value: Decimal) -> Decimal:
    return _max_scale(value, DELTA_SCALE, "δ")


def check_significant_digits(value: Decimal, limit: int) -> Decimal:
    # Counted on the digits as given: normalize() would first round them to the context's 28.
    significant = "".join(map(str, value.as_tuple().digits)).strip("0")
    if len(significant) > limit:
        raise ValueError(f"at most {limit} significant digits")
    return value
