"""Privacy per unit (person, account) instead of per row: the unit, and truncation to k rows.

With a privacy unit, neighbouring tables differ by every row of one unit, and the service keeps at
most ``k = max_rows`` rows of each unit before anything else reads the table; the mechanisms then
account for a unit moving up to k rows (see docs/privacy.md, "Privacy per person").
"""

from engine.privacy_unit.truncation import (
    DEFAULT_MAX_ROWS,
    MAX_MAX_ROWS,
    PrivacyUnit,
    Truncation,
    new_hash_key,
    row_hashes,
    truncate,
)

__all__ = [
    "DEFAULT_MAX_ROWS",
    "MAX_MAX_ROWS",
    "PrivacyUnit",
    "Truncation",
    "new_hash_key",
    "row_hashes",
    "truncate",
]
