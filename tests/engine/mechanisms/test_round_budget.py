"""AIM's round budget (engine.mechanisms.aim.round_budget): exact totals, and the anneal guard keeps
at least k rounds after every anneal, for any sequence of anneal decisions."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.mechanisms.aim.round_budget import RoundBudget, RoundCharge


def _run(budget: RoundBudget, wants: list[bool]) -> tuple[list[RoundCharge], list[int]]:
    """Every round until the budget ends; the round wants to anneal after it if ``wants`` says
    so (cycled). Returns the charges and the indices of the rounds after which it annealed."""
    charges: list[RoundCharge] = []
    anneals: list[int] = []
    while not budget.finished:
        budget, charge = budget.next_round()
        charges.append(charge)
        if wants[(len(charges) - 1) % len(wants)]:
            annealed = budget.anneal()
            if annealed != budget:
                anneals.append(len(charges) - 1)
            budget = annealed
        assert len(charges) < 100_000
    return charges, anneals


budgets = st.builds(
    lambda rho, used_share, rounds, share, k: RoundBudget.start(
        total=rho,
        used=rho * used_share,
        rounds=rounds,
        select_share=share,
        min_rounds_after_anneal=k,
    ),
    rho=st.fractions(min_value=Fraction(1, 10**6), max_value=10).filter(lambda x: x > 0),
    used_share=st.sampled_from([Fraction(0), Fraction(1, 4), Fraction(9, 10)]),
    rounds=st.integers(1, 600),
    share=st.sampled_from([Fraction(1, 20), Fraction(1, 10), Fraction(1, 2)]),
    k=st.one_of(st.none(), st.integers(2, 40)),
)


@settings(max_examples=300, deadline=None)
@given(budget=budgets, wants=st.lists(st.booleans(), min_size=1, max_size=30))
def test_charges_sum_exactly_and_every_anneal_leaves_k_rounds(
    budget: RoundBudget, wants: list[bool]
) -> None:
    charges, anneals = _run(budget, wants)
    spent = sum((c.select + c.measure for c in charges), Fraction(0))
    assert budget.used + spent == budget.total
    assert all(c.select > 0 and c.measure > 0 for c in charges)
    assert [c.last for c in charges] == [False] * (len(charges) - 1) + [True]
    # The last round takes s of what was left for selection.
    assert charges[-1].select == (charges[-1].select + charges[-1].measure) * budget.select_share
    k = budget.min_rounds_after_anneal
    if k is not None:
        for index in anneals:
            assert len(charges) - 1 - index >= k, (index, len(charges), k)
    # Between anneals a round costs what the one before it cost; an anneal multiplies it by 4.
    for i in range(1, len(charges) - 1):
        ratio = (charges[i].select + charges[i].measure) / (
            charges[i - 1].select + charges[i - 1].measure
        )
        assert ratio == (4 if i - 1 in anneals else 1)


def test_the_guard_refuses_an_anneal_that_would_leave_fewer_than_k_rounds() -> None:
    """ρ = 1, T = 100, s = 1/20: a round costs 1/100. After 40 rounds 60/100 are left: k = 15
    rounds at 4/100 fit, k = 16 do not."""
    for k, allowed in ((15, True), (16, False)):
        budget = RoundBudget.start(Fraction(1), Fraction(0), 100, Fraction(1, 20), k)
        for _ in range(40):
            budget, charge = budget.next_round()
            assert charge.select + charge.measure == Fraction(1, 100)
        assert budget.may_anneal() is allowed
        annealed = budget.anneal()
        assert (annealed.measure == 4 * budget.measure) is allowed
        assert (annealed == budget) is not allowed


def test_the_paper_rule_anneals_into_one_last_round() -> None:
    """Without the guard (k None) an anneal is always taken, even when what is left pays for
    less than one round at the new cost; that round then takes the remainder."""
    budget = RoundBudget.start(Fraction(1), Fraction(0), 10, Fraction(1, 10), None)
    for _ in range(8):
        budget, _charge = budget.next_round()
    budget = budget.anneal()
    assert budget.measure == 4 * Fraction(9, 100)
    budget, charge = budget.next_round()
    assert charge.last and charge.select + charge.measure == Fraction(2, 10)
    assert budget.finished and not budget.may_anneal()
    with pytest.raises(RuntimeError):
        budget.next_round()


@pytest.mark.parametrize(
    ("field", "value"),
    [("total", Fraction(0)), ("used", Fraction(2)), ("min_rounds_after_anneal", 1)],
)
def test_invalid_states_are_refused(field: str, value: object) -> None:
    args: dict[str, object] = {
        "total": Fraction(1),
        "used": Fraction(0),
        "select": Fraction(1, 100),
        "measure": Fraction(1, 10),
        "select_share": Fraction(1, 20),
        "min_rounds_after_anneal": 4,
    }
    args[field] = value
    with pytest.raises(ValueError):
        RoundBudget(**args)  # type: ignore[arg-type]
