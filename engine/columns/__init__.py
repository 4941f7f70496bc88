"""Column types of a declared schema: how raw values become codes and codes become values.

See :mod:`engine.tables.encoding` for the table-level schema built from them.
"""

from engine.columns.base import (
    DEFAULT_MISSING_VALUES,
    MISSING,
    OUTSIDE,
    REASONS,
    UNDECLARED,
    UNPARSEABLE,
    SchemaError,
)
from engine.columns.categorical import BooleanColumn, CategoricalColumn, CodesColumn
from engine.columns.numeric import NumericColumn
from engine.columns.spec import (
    Column,
    DiscoveredCategories,
    IgnoredColumn,
    Pending,
    QuantileBins,
)
from engine.columns.temporal import DateColumn, DatetimeColumn

__all__ = [
    "DEFAULT_MISSING_VALUES",
    "MISSING",
    "OUTSIDE",
    "REASONS",
    "UNDECLARED",
    "UNPARSEABLE",
    "BooleanColumn",
    "CategoricalColumn",
    "CodesColumn",
    "Column",
    "DateColumn",
    "DatetimeColumn",
    "DiscoveredCategories",
    "IgnoredColumn",
    "NumericColumn",
    "Pending",
    "QuantileBins",
    "SchemaError",
]
