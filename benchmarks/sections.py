"""Level-2 sections of docs/benchmarks.md that separate scripts write (a section runs from its
heading to the next ``## `` heading), so regenerating one part keeps the others."""

from __future__ import annotations

import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path


def current_section(document: str, heading: str) -> str:
    """The section of ``document`` that starts with ``heading``, or "" if there is none."""
    start = document.find(heading)
    if start < 0:
        return ""
    end = document.find("\n## ", start + len(heading))
    return document[start:] if end < 0 else document[start : end + 1]


def replace_section(document: str, heading: str, section: str) -> str:
    """``document`` with the section under ``heading`` replaced by ``section`` (appended if
    absent; ``document`` unchanged if ``section`` is empty)."""
    if not section:
        return document
    start = document.find(heading)
    if start < 0:
        return document.rstrip("\n") + "\n\n" + section
    end = document.find("\n## ", start + len(heading))
    if end < 0:
        return document[:start] + section
    # As current_section returns it, a section ends with the newline before the next heading;
    # a blank line separates it from that heading.
    gap = "" if section.endswith("\n\n") else "\n" if section.endswith("\n") else "\n\n"
    return document[:start] + section + gap + document[end + 1 :]


def update_or_print(path: Path | None, heading: str, section: str) -> None:
    """Replace the section under ``heading`` in the Markdown file at ``path``, or print the
    section when there is no file (the benchmark scripts' ``--update``)."""
    if path is None:
        print(section)
        return
    document = path.read_text(encoding="utf-8")
    path.write_text(replace_section(document, heading, section), encoding="utf-8")


def headings(document: str) -> list[str]:
    """The level-2 headings of ``document``, in order."""
    return [line for line in document.splitlines() if line.startswith("## ")]


def keep_other_sections(document: str, previous: str) -> str:
    """``document`` with every section of ``previous`` that it lacks appended, in their order:
    a script that regenerates some sections keeps the ones other scripts (or hands) wrote."""
    present = set(headings(document))
    for heading in headings(previous):
        if heading not in present:
            document = replace_section(document, heading, current_section(previous, heading))
    return document


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[str]], align: str) -> list[str]:
    """A Markdown table's lines; ``align`` holds one ``l`` or ``r`` per column."""
    marks = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(marks) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def git_commit(checkout: Path = Path(__file__).resolve().parents[1], length: int = 12) -> str:
    """The short hash of ``checkout``'s HEAD (the commit a section was measured at), or
    ``"unknown"`` where git cannot tell."""
    try:
        completed = subprocess.run(  # noqa: S603 - a fixed argv, no shell
            ["git", "rev-parse", f"--short={length}", "HEAD"],  # noqa: S607 - git from PATH
            capture_output=True,
            text=True,
            check=False,
            cwd=checkout,
        )
    except OSError:
        return "unknown"
    return completed.stdout.strip() or "unknown"
