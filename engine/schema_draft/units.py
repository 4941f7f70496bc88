"""Proposing a privacy unit (issue 28 §1): which column looks like a person's or an account's id.

Read from a column's **name and drafted kind only**, never its values: a name that marks an
identifier (``id``, ``key``, ``no``, ``number``, ``uuid``...) together with a word for a person or
an account (``customer_id``, ``patientId``, ``account_number``, ``user_key``, ``member_no``...),
or a name that is one on its own (``ssn``, ``mrn``, ``email``), in a column drafted as ``ignore``
(an identifier), categorical, or integer. Dates, booleans and fractional numbers are never units.

The proposal is a *suggestion* beside the draft, not part of its schema: a draft accepted as is
keeps today's row-level guarantee and keeps every row. Naming a unit is the owner's choice
because it trades rows for a stronger guarantee at a price only they can judge: with k rows per
person, every person's rows beyond k are dropped at upload (which k keeps most of a table depends
on how many rows people have, which the draft does not read) and the noise of every release grows
k-fold at the same ρ (docs/privacy.md, "Privacy per person").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.privacy_unit import DEFAULT_MAX_ROWS
from engine.schema_draft.meanings import tokens

PERSON_WORDS = frozenset(
    {
        "person", "people", "customer", "client", "patient", "driver", "borrower", "account",
        "user", "member", "subject", "employee", "staff", "student", "pupil", "citizen",
        "resident", "household", "holder", "cardholder", "policyholder", "applicant",
        "participant", "respondent", "passenger", "buyer", "seller", "shopper", "visitor",
        "beneficiary", "taxpayer", "voter", "worker", "individual", "consumer", "subscriber",
        "player", "donor", "tenant", "insured", "claimant", "debtor", "guest", "owner",
    }
)  # fmt: skip
"""Words that name a person or an account in a column name."""

ID_WORDS = frozenset(
    {"id", "ids", "uuid", "guid", "identifier", "key", "no", "nr", "num", "number", "code", "ref"}
)
"""Words that make a person word an identifier (``customer_no``, ``account_number``)."""

ALONE = frozenset({("ssn",), ("mrn",), ("nhs", "number"), ("nino",), ("email",), ("e", "mail")})
"""Names that identify a person on their own."""

UNIT_KINDS = frozenset({"ignore", "categorical", "codes"})


@dataclass(frozen=True)
class UnitProposal:
    """A suggested ``privacy_unit``: the column, the default k, and why (names no value)."""

    column: str
    max_rows: int
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"column": self.column, "max_rows": self.max_rows, "reason": self.reason}


def looks_like_unit(name: str, entry: Mapping[str, Any]) -> bool:
    """Whether a column named ``name``, drafted as ``entry``, looks like a person's or an
    account's id (its name and kind only)."""
    kind = entry.get("type")
    integer = kind == "numeric" and bool(entry.get("integer"))
    if kind not in UNIT_KINDS and not integer:
        return False
    words = tokens(name)
    if words in ALONE:
        return True
    return bool(PERSON_WORDS.intersection(words)) and bool(ID_WORDS.intersection(words))


def propose_unit(entries: Sequence[Mapping[str, Any]]) -> UnitProposal | None:
    """The first column that looks like a person's or an account's id, as a suggestion."""
    for entry in entries:
        name = entry.get("name")
        if isinstance(name, str) and looks_like_unit(name, entry):
            return UnitProposal(
                column=name,
                max_rows=DEFAULT_MAX_ROWS,
                reason=unit_advice(name),
            )
    return None


def unit_advice(name: str) -> str:
    """The suggestion's explanation: the trade-off, in a sentence or three."""
    return (
        f"Column {name!r} looks like a person's or an account's id (by its name). If one person "
        "can have several rows, the row-level guarantee protects a row, not a person: add "
        f'"privacy_unit": {{"column": "{name}", "max_rows": k}} to the schema to make ρ and ε '
        "hold per person. At upload, each person's rows beyond k are then dropped (chosen at "
        "random, the report says how many) and every release's noise grows k-fold at the same "
        f"ρ; k defaults to {DEFAULT_MAX_ROWS}. Not added to the schema: the draft does not read "
        "how many rows people have, so the choice of k is yours."
    )


__all__ = ["ALONE", "ID_WORDS", "PERSON_WORDS", "UnitProposal", "looks_like_unit", "propose_unit"]
