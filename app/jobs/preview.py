"""The dry run of a submission (``POST /v1/datasets/{id}/jobs?dry_run=true``): what a job would
cost, decided by the same checks as a real submission, with nothing reserved or written.

Everything in a preview is public or already visible to the caller: the validated params, ρ and
its (ε, δ) statements, the dataset's remaining ρ (shown to every key of the tenant with the
dataset), the noise of the method's first releases (from the budget split and the declared
domain), the per-job limits and a predicted time and memory (:func:`engine.costs.predict_cost`).
The prediction needs a row count: the rows requested, or, for owner keys, the table's exact row
count (owners see it on the dataset); for an analyst who gives no rows, the noisy row count of the
dataset's latest release sized by its mechanism (a DP output the analyst can already see), and no
prediction before there is one: the exact row count is private.

A dry run over budget answers 200 with ``would_exceed_budget: true`` and the numbers a 409 would
carry (requested and remaining ρ): a preview is for planning, so it reports rather than refuses.
Every other refusal (422, 404, 409 for a deleted dataset) is the real submission's, word for word.
"""

from __future__ import annotations

import uuid
from decimal import Decimal
from fractions import Fraction

from sqlalchemy.orm import Session

from app.auth.service import Principal
from app.budget import repository as budget_repository
from app.budget import service as budget_service
from app.config import Settings
from app.jobs.schemas import (
    CostPredictionOut,
    EpsilonAtDeltaOut,
    JobLimitsOut,
    JobPreview,
    JobRequest,
    NoisePreviewOut,
)
from app.jobs.service import decimal_text, validate_submission
from engine.accounting import epsilon_from_rho_delta
from engine.reports.unit import unit_phrase

PROFILE_DELTAS: tuple[Decimal, ...] = (Decimal("1e-5"), Decimal("1e-7"), Decimal("1e-9"))
"""The δ at which every preview states ε (the request's own δ is added when given)."""


def preview_job(
    session: Session,
    settings: Settings,
    principal: Principal,
    dataset_id: uuid.UUID,
    request: JobRequest,
) -> JobPreview:
    """The cost of ``request`` on the dataset, validated exactly as :func:`submit_job` validates
    it (same exceptions, same messages); reserves nothing and writes nothing."""
    checked = validate_submission(session, settings, principal, dataset_id, request)
    mechanism, params, budget = checked.mechanism, checked.params, checked.budget
    account = budget_repository.get_account(session, dataset_id)
    if account is None:  # pragma: no cover - every dataset has an account
        raise LookupError(dataset_id)
    remaining = account.remaining_rho
    # Quotas (issue 27 §2): the key's quota, or what a reserved policy leaves beside the shares.
    limits = budget_service.submitter_limits(
        session, dataset_id, None if principal.is_owner else principal.key_id
    )
    exceeds = budget.rho + limits.keep_rho > remaining or (
        limits.quota_remaining_rho is not None and budget.rho > limits.quota_remaining_rho
    )

    deltas = sorted({*PROFILE_DELTAS, *([budget.delta] if budget.delta is not None else [])})
    # The release uses the domain discovery published, whose δ (the ledger's spent_delta) adds
    # to every conversion δ: (ε(ρ, δ_conv), δ_conv + spent_delta)-DP.
    discovery_delta = account.spent_delta
    profile = [
        EpsilonAtDeltaOut(
            delta=decimal_text(delta + discovery_delta) or "0",
            conversion_delta=decimal_text(delta) or "0",
            discovery_delta=decimal_text(discovery_delta) or "0",
            epsilon=decimal_text(epsilon_from_rho_delta(budget.rho, delta)) or "0",
        )
        for delta in deltas
    ]
    first = [
        NoisePreviewOut(
            description=noise.description,
            attributes=list(noise.attributes),
            sensitivity=float(noise.sensitivity),
            sigma=noise.sigma,
            rho=float(noise.rho),
        )
        for noise in mechanism.noise_preview(
            checked.domain,
            params,
            Fraction(budget.rho),
            contribution_bound=checked.dataset.unit_max_rows or 1,
        )
    ]
    prediction = None
    if checked.prediction is not None and checked.prediction_rows is not None:
        cost = checked.prediction
        prediction = CostPredictionOut(
            rows=checked.prediction_rows,
            rows_source=checked.rows_source,
            seconds=cost.seconds,
            seconds_factor=cost.seconds_factor,
            peak_memory_bytes=cost.peak_memory_bytes,
            memory_factor=cost.memory_factor,
        )
    return JobPreview(
        method=mechanism.name,
        params=params.model_dump(mode="json"),
        rows=request.rows,
        rho=budget.rho,
        epsilon=decimal_text(budget.epsilon),
        delta=decimal_text(budget.delta),
        privacy_unit=unit_phrase(checked.dataset.unit_max_rows),
        unit_max_rows=checked.dataset.unit_max_rows,
        privacy_profile=profile,
        discovery_delta=decimal_text(discovery_delta) or "0",
        remaining_rho=remaining,
        remaining_rho_after=None if exceeds else remaining - budget.rho,
        would_exceed_budget=exceeds,
        quota=limits.quota,
        quota_remaining_rho=limits.quota_remaining_rho,
        first_noise=first,
        prediction=prediction,
        limits=JobLimitsOut(
            memory_limit_bytes=settings.job_memory_limit_mb * 2**20,
            time_limit_seconds=settings.job_time_limit_seconds,
            max_output_rows=settings.max_output_rows,
            memory_upper_bound_bytes=checked.estimate.memory_bytes,
        ),
    )
