"""Quality reports of a release in two tiers (docs/reports.md).

The release tier (:func:`build_release_report`) is DP post-processing only: it is built from the
release record, the synthetic rows and the fitted model, and may go to analysts. The owner tier
(:func:`build_owner_report`) reads the real table (its codes and, when given, its raw values:
engine/reports/values.py compares them with the synthetic values and gives the verdict) and goes
to the data owner only.
:func:`render_html` renders either as one self-contained page.
"""

from engine.reports.html import render_html
from engine.reports.owner import build_owner_report
from engine.reports.release import build_release_report

__all__ = ["build_owner_report", "build_release_report", "render_html"]
