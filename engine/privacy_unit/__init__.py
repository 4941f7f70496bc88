"""Privacy per unit (person, account) instead of per row: the unit, and truncation to k rows.

With a privacy unit, neighbouring tables differ by every row of one unit, and the service keeps at
most ``k = max_rows`` rows of each unit before anything else reads the table; the mechanisms then
account for a unit moving up to k rows (see docs/privacy.md, "Privacy per person"):
:func:`row_level_rho` is the budget a run spends at the row level (ρ/k²),
engine/privacy_unit/group.py states the group scaling, and :func:`noisy_truncation` releases
what truncation removed.
"""

from engine.privacy_unit.group import (
    check_contribution_bound,
    row_level_rho,
    unit_level_epsilon,
    unit_level_rho,
)
from engine.privacy_unit.report import (
    MIN_CAP,
    TRUNCATION_MECHANISM,
    NoisyTruncation,
    default_cap,
    noisy_truncation,
)
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
    "MIN_CAP",
    "TRUNCATION_MECHANISM",
    "NoisyTruncation",
    "PrivacyUnit",
    "Truncation",
    "check_contribution_bound",
    "default_cap",
    "new_hash_key",
    "noisy_truncation",
    "row_hashes",
    "row_level_rho",
    "truncate",
    "unit_level_epsilon",
    "unit_level_rho",
]
