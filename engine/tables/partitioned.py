"""A large synthetic table drawn and written in chunks, as a partitioned Parquet dataset.

Drawing a release of ``n`` rows at once holds ``n × columns`` codes (at 100 M rows × 15
columns, 1.5 GB) before decoding starts. :func:`write_partitioned` instead draws the rows in
chunks of at most ``chunk_rows`` from the fitted model's sampler (``FittedModel.sample``),
decodes each chunk and writes it as one Parquet file ``part-00000.parquet``, ``part-00001…``
(the service's output format: ``engine.tables.synthetic_output.write_synthetic``), with at most
``workers`` chunks in flight in a thread pool; a finished chunk is dropped before the next one
is drawn, so memory is bounded by ``workers`` chunks whatever ``n``.

Privacy: the fitted model is a DP release; drawing rows from it, decoding them and keeping the
schema's rules (engine.constraints.keep, per chunk, with the same sampler for redraws) is
post-processing and costs no ρ. Randomness: chunk ``i`` uses its own generator from
``numpy.random.SeedSequence(seed).spawn`` (child ``i``): the same seed gives byte-identical
parts whatever the number of workers or the order chunks finish in. Seeds drive
post-processing only; no DP noise is drawn here.

Reports need the synthetic rows (engine/reports/release.py reads shares of codes): the result
keeps a uniform subsample of at most ``sample_rows`` rows (each chunk contributes a share
proportional to its rows, chosen with a second generator of its own), the row count, the parts
(name, rows, bytes) and, for a schema with rules, the per-chunk rule reports summed.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from engine.constraints.keep import DEFAULT_ROUNDS, KeepReport, RuleCounts, Sampler
from engine.tables.encoding import TableSchema
from engine.tables.synthetic_output import write_synthetic

CodeArray = npt.NDArray[np.integer[Any]]

DEFAULT_CHUNK_ROWS = 2_000_000
DEFAULT_SAMPLE_ROWS = 1_000_000
MAX_PARTS = 100_000


def part_name(index: int) -> str:
    """The file name of part ``index`` (zero-padded, so names sort in row order)."""
    return f"part-{index:05d}.parquet"


def chunk_sizes(rows: int, chunk_rows: int) -> list[int]:
    """``rows`` split into chunks of ``chunk_rows`` (the last one shorter); one empty chunk for
    ``rows == 0`` (an empty table still has a file with the schema)."""
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 0:
        raise ValueError("rows must be a non-negative int")
    if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, int) or chunk_rows < 1:
        raise ValueError("chunk_rows must be a positive int")
    if rows == 0:
        return [0]
    full, rest = divmod(rows, chunk_rows)
    sizes = [chunk_rows] * full + ([rest] if rest else [])
    if len(sizes) > MAX_PARTS:
        raise ValueError(f"more than {MAX_PARTS} parts: raise chunk_rows")
    return sizes


def sample_shares(sizes: list[int], sample_rows: int) -> list[int]:
    """Rows each chunk gives the report's subsample: proportional to its size (largest
    remainders), at most ``sample_rows`` in all and never more than the chunk has."""
    total = sum(sizes)
    if total <= sample_rows:
        return list(sizes)
    exact = [size * sample_rows / total for size in sizes]
    shares = [int(x) for x in exact]
    order = sorted(range(len(sizes)), key=lambda i: exact[i] - shares[i], reverse=True)
    for i in order[: sample_rows - sum(shares)]:
        shares[i] += 1
    return shares


@dataclass(frozen=True)
class Part:
    """One written file of a partitioned output: its name, rows and size in bytes."""

    name: str
    rows: int
    bytes: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "rows": self.rows, "bytes": self.bytes}


@dataclass(frozen=True)
class PartitionedOutput:
    """What :func:`write_partitioned` wrote: the parts in row order, the total rows, a uniform
    subsample of the written codes for the reports (at most ``sample_rows``), and the summed
    rule report (None for a schema without rules)."""

    parts: tuple[Part, ...]
    rows: int
    sample: CodeArray
    rules: KeepReport | None

    def __post_init__(self) -> None:
        if self.rows != sum(p.rows for p in self.parts):
            raise ValueError("rows must be the sum of the parts' rows")
        if self.sample.ndim != 2 or self.sample.shape[0] > self.rows:
            raise ValueError("the sample must be a 2-d array of at most rows rows")


def merge_reports(reports: list[KeepReport]) -> KeepReport:
    """The rule reports of the chunks summed into one (the same rules, in the same order)."""
    first = reports[0]
    counts = [
        RuleCounts(
            rule.rule,
            **{
                f.name: sum(getattr(r.rules[j], f.name) for r in reports)
                for f in fields(RuleCounts)
                if f.name != "rule"
            },
        )
        for j, rule in enumerate(first.rules)
    ]
    summed = {
        name: sum(getattr(r, name) for r in reports)
        for name in (
            "rows",
            "violating_rows_before",
            "resampled_rows",
            "redrawn_rows",
            "repaired_rows",
            "remaining_rows",
            "drawn_rows",
        )
    }
    return KeepReport(counts, redraw=first.redraw, rounds=first.rounds, **summed)


@dataclass(frozen=True)
class _Chunk:
    part: Part
    sample: CodeArray
    rules: KeepReport | None


def write_partitioned(
    schema: TableSchema,
    sampler: Sampler,
    rows: int,
    seed: int | np.random.SeedSequence | None,
    folder: Path,
    *,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    workers: int = 2,
    sample_rows: int = DEFAULT_SAMPLE_ROWS,
    rounds: int = DEFAULT_ROUNDS,
    on_part: Callable[[Part], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> PartitionedOutput:
    """Draw ``rows`` rows from ``sampler`` and write them decoded to ``folder`` as
    ``part-NNNNN.parquet`` files of at most ``chunk_rows`` rows (see the module docstring).

    ``seed``: the job's post-processing seed (an int, a SeedSequence, or None for fresh
    entropy). ``workers``: chunks drawn and written at once (threads). ``on_part`` is called
    (from the calling thread, in row order) after each part is written, e.g. to upload and
    delete it; ``cancelled`` is polled between chunks and stops the run with
    :class:`PartitionCancelled`. The folder must exist; files in it are overwritten.
    """
    if not isinstance(schema, TableSchema):
        raise TypeError("schema must be a TableSchema")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError("workers must be a positive int")
    if isinstance(sample_rows, bool) or not isinstance(sample_rows, int) or sample_rows < 0:
        raise ValueError("sample_rows must be a non-negative int")
    sizes = chunk_sizes(rows, chunk_rows)
    shares = sample_shares(sizes, sample_rows)
    root = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    children = root.spawn(len(sizes))

    results: list[_Chunk | None] = [None] * len(sizes)
    reports: list[KeepReport] = []

    def run(index: int) -> tuple[_Chunk, KeepReport | None]:
        draw_seq, pick_seq = children[index].spawn(2)
        rng = np.random.default_rng(draw_seq)
        codes = sampler(sizes[index], rng)
        if codes.shape != (sizes[index], len(schema.columns)):
            raise RuntimeError(f"the sampler drew codes of shape {codes.shape}")
        path = folder / part_name(index)
        kept = write_synthetic(schema, codes, rng, path, "parquet", sampler=sampler, rounds=rounds)
        written = codes if kept is None else kept.codes
        del codes
        pick = np.random.default_rng(pick_seq)
        chosen = np.sort(pick.choice(written.shape[0], shares[index], replace=False))
        sample = np.array(written[chosen])
        del written
        report = None if kept is None else kept.report
        del kept
        part = Part(part_name(index), sizes[index], path.stat().st_size)
        return _Chunk(part, sample, report), report

    next_index = 0
    delivered = 0
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="partition") as pool:
        running: dict[Future[tuple[_Chunk, KeepReport | None]], int] = {}
        try:
            while delivered < len(sizes):
                while next_index < len(sizes) and len(running) < workers:
                    if cancelled is not None and cancelled():
                        raise PartitionCancelled
                    running[pool.submit(run, next_index)] = next_index
                    next_index += 1
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    index = running.pop(future)
                    chunk, report = future.result()
                    results[index] = chunk
                    if report is not None:
                        reports.append(report)
                # Parts are handed on in row order, each as soon as those before it are.
                while delivered < len(sizes) and results[delivered] is not None:
                    ready = results[delivered]
                    if on_part is not None and ready is not None:
                        on_part(ready.part)
                    delivered += 1
        except BaseException:
            for future in running:
                future.cancel()
            raise
    chunks = [c for c in results if c is not None]
    sample: CodeArray = np.concatenate([c.sample for c in chunks])
    return PartitionedOutput(
        parts=tuple(c.part for c in chunks),
        rows=sum(sizes),
        sample=sample,
        rules=merge_reports(reports) if schema.rules and reports else None,
    )


class PartitionCancelled(Exception):
    """Raised by :func:`write_partitioned` when ``cancelled()`` answered True."""


__all__ = [
    "DEFAULT_CHUNK_ROWS",
    "DEFAULT_SAMPLE_ROWS",
    "Part",
    "PartitionCancelled",
    "PartitionedOutput",
    "chunk_sizes",
    "merge_reports",
    "part_name",
    "sample_shares",
    "write_partitioned",
]
