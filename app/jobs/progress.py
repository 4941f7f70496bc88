"""The two progress channels of a job (docs/privacy.md, "What analysts see and never see").

*Public progress* (``jobs.progress_fraction`` / ``progress_stage``, every key of the tenant) is a
function of public information only: it moves through :func:`public_schedule`, the service's own
phases around the method's declared milestones, each at a fixed fraction. A lost attempt is re-run
with fresh noise for the same charge, so nothing an analyst sees of an attempt may depend on its
noise; the schedule does not, by construction (``engine.mechanisms.base.ProgressReporter``).

*Detail progress* (``jobs.detail_fraction`` / ``detail_stage``, owner keys only) is the engine's
own progress, which can depend on the data and the noise (AIM's rounds move it by the budget they
spent, and whether it anneals depends on the noisy measurements).
"""

from __future__ import annotations

from typing import NamedTuple

from engine.mechanisms import get_mechanism

ENGINE_SHARE = 0.95  # of the progress bar; the rest is the output and the release's artefacts


class ProgressPoint(NamedTuple):
    fraction: float
    stage: str


QUEUED = ProgressPoint(0.0, "queued")
STARTING = ProgressPoint(0.0, "starting")
DONE = ProgressPoint(1.0, "done")
# The service's phases inside an attempt, around the engine's milestones.
PHASES = {
    "load": ProgressPoint(0.0, "load"),
    "write": ProgressPoint(ENGINE_SHARE, "write"),
    "report": ProgressPoint(0.97, "report"),
}
# Owner-only detail of a job whose lost attempt was put back in the queue.
REQUEUED_DETAIL = ProgressPoint(0.0, "requeued")


def engine_point(fraction: float, stage: str) -> ProgressPoint:
    """A point of the engine's progress (a milestone or detail) on the job's progress bar,
    rounded to 4 decimals (0.665, not 0.6649999999999999)."""
    return ProgressPoint(round(min(1.0, max(0.0, ENGINE_SHARE * fraction)), 4), stage[:64])


def public_schedule(method: str) -> tuple[ProgressPoint, ...]:
    """Every public progress point a job of ``method`` passes through, in order, until it
    succeeds. A job that fails or is cancelled keeps the fraction of the last point it reached,
    with the stage ``failed`` or ``cancelled``; a requeued job goes back to ``QUEUED``."""
    milestones = get_mechanism(method).milestones
    return (
        QUEUED,
        STARTING,
        PHASES["load"],
        *(engine_point(m.fraction, m.stage) for m in milestones),
        PHASES["write"],
        PHASES["report"],
        DONE,
    )
