"""Benchmarks for rhosynth: engine quality and speed, and the service under load.

* :mod:`benchmarks.quality` — every registered mechanism on every dataset of a data directory
  laid out like ``../shared/data``, at several ε, each run in a fresh child process; accuracy by
  the independent evaluator ``../shared/bench/marginal_error.py``; plus where an ``independent``
  job's time goes (the discrete Gaussian sampler's share).
* :mod:`benchmarks.service_load` — a real stack (PostgreSQL, Redis, uvicorn, Celery workers)
  under a bounded closed-loop load on loopback; latency per endpoint, job throughput, and an
  exact ledger check afterwards (RELIABILITY.md, test 14).
* :mod:`benchmarks.run` — runs both and writes ``docs/benchmarks.md``.

Nothing here is imported by the service or by the test suite.
"""
