"""Level-2 sections of docs/benchmarks.md that separate scripts write (a section runs from its
heading to the next ``## `` heading), so regenerating one part keeps the others."""

from __future__ import annotations


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
    # The section ends with the newline before the next heading (as current_section returns it).
    return document[:start] + section + ("" if end < 0 else document[end + 1 :])
