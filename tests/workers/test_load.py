"""RELIABILITY.md test 14, bounded for CI: concurrent users against a real stack for a few
seconds; no 5xx, no unexpected 4xx, Idempotency-Key retries return the same job, every job
finishes, and every ledger is exact afterwards. Latency figures belong in docs/benchmarks.md
(`make bench`), not in a pass/fail test."""

from __future__ import annotations

import pytest

from benchmarks.service_load import LoadConfig, run_load

pytestmark = [pytest.mark.load, pytest.mark.usefixtures("_services")]


def test_bounded_load_keeps_the_ledger_exact() -> None:
    report = run_load(LoadConfig(users=8, duration_seconds=8.0, workers=1), data_dir=None)
    assert report.failures == []
    assert report.drained
    requests = sum(stats.count for stats in report.endpoints.values())
    assert requests > 100
    assert report.ledger and all(entry["reconciled"] for entry in report.ledger)
    jobs = sum(entry["charged_jobs"] for entry in report.ledger)
    assert jobs > 5
    print(f"\nload: {requests} requests, {jobs} charged jobs, no failures")
