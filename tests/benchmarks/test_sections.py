"""docs/benchmarks.md sections written by separate scripts survive each other's rewrites."""

from __future__ import annotations

from benchmarks.sections import current_section, keep_other_sections, replace_section

DOC = "# Benchmarks\n\n## A\n\na\n\n## B\n\nb old\n\n## C\n\nc\n"


def test_a_section_is_replaced_in_place_and_the_others_kept() -> None:
    assert current_section(DOC, "## B") == "## B\n\nb old\n\n"
    new = replace_section(DOC, "## B", "## B\n\nb new\n\n")
    assert new == "# Benchmarks\n\n## A\n\na\n\n## B\n\nb new\n\n## C\n\nc\n"
    assert current_section(new, "## C") == "## C\n\nc\n"


def test_a_missing_section_is_appended_and_an_empty_one_changes_nothing() -> None:
    assert replace_section(DOC, "## D", "## D\n\nd\n").endswith("## C\n\nc\n\n## D\n\nd\n")
    assert replace_section(DOC, "## B", "") == DOC
    assert current_section(DOC, "## D") == ""


def test_writing_back_the_current_section_changes_nothing() -> None:
    for heading in ("## A", "## B", "## C"):
        assert replace_section(DOC, heading, current_section(DOC, heading)) == DOC


def test_sections_the_new_document_lacks_are_kept_in_their_order() -> None:
    previous = "# T\n\n## A\nold a\n\n## Hand\nby hand\n\n## B\nold b\n\n## Other\nother\n"
    regenerated = "# T\n\n## A\nnew a\n\n## B\nnew b\n"
    kept = keep_other_sections(regenerated, previous)
    assert kept == "# T\n\n## A\nnew a\n\n## B\nnew b\n\n## Hand\nby hand\n\n## Other\nother\n"
    assert keep_other_sections(kept, previous) == kept
