"""Declared cross-column rules that synthetic rows must keep (issue 28 §2).

:mod:`engine.constraints.rules` parses and validates the schema's ``"rules"`` (public facts
only); :mod:`engine.constraints.keep` checks them on decoded synthetic rows, redraws the rows
that break one from the fitted model, then repairs what is left. Post-processing only: no ρ.

This package imports nothing from engine.tables (engine/tables/encoding.py imports it).
"""

from engine.constraints.rules import (
    Allowed,
    Compare,
    Condition,
    Rule,
    Sum,
    check_rule_sizes,
    check_rules,
    describe,
    parse_rules,
    rule_to_json,
)

__all__ = [
    "Allowed",
    "Compare",
    "Condition",
    "Rule",
    "Sum",
    "check_rule_sizes",
    "check_rules",
    "describe",
    "parse_rules",
    "rule_to_json",
]
