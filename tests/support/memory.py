"""Peak resident memory of a running process, sampled from the test (psutil)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass

import psutil


@dataclass
class PeakRss:
    idle: int = 0
    peak: int = 0

    @property
    def growth_mib(self) -> float:
        return (self.peak - self.idle) / (1024 * 1024)


def _rss(process: psutil.Process) -> int:
    total = process.memory_info().rss
    for child in process.children(recursive=True):
        with suppress(psutil.NoSuchProcess):
            total += child.memory_info().rss
    return int(total)


@contextmanager
def peak_rss(pid: int, interval: float = 0.002) -> Iterator[PeakRss]:
    """Sample the RSS of ``pid`` (and its children) until the block ends; ``idle`` is before it."""
    process = psutil.Process(pid)
    result = PeakRss(idle=_rss(process))
    result.peak = result.idle
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            try:
                result.peak = max(result.peak, _rss(process))
            except psutil.NoSuchProcess:
                return
            stop.wait(interval)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield result
    finally:
        stop.set()
        sampler.join()
        result.peak = max(result.peak, _rss(process))
