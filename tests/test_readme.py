"""The README's walkthrough works for a newcomer: it uses only files the repository ships, writes
only into its temporary folder, and lets curl failures show."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def _walkthrough_shell() -> list[str]:
    text = README.read_text(encoding="utf-8")
    start = text.index("## A first release")
    end = text.index("\n## ", start + 5)
    return re.findall(r"```sh\n(.*?)```", text[start:end], re.DOTALL)


def test_walkthrough_uses_shipped_files_only() -> None:
    blocks = _walkthrough_shell()
    assert blocks
    for block in blocks:
        assert "../shared" not in block
    for path in re.findall(r"(?:file=@|schema=<)([^\s\"]+)", "\n".join(blocks)):
        if not path.startswith("$WORK/"):
            assert (README.parent / path).is_file(), path


def test_walkthrough_writes_only_into_its_temporary_folder() -> None:
    shell = "\n".join(_walkthrough_shell())
    assert "WORK=$(mktemp -d)" in shell
    targets = re.findall(r"(?:-o|>)\s+([^\s|;)]+)", shell)
    assert targets, "the walkthrough writes files"
    for target in targets:
        assert target.startswith("$WORK/"), target


def test_walkthrough_curl_fails_visibly() -> None:
    calls = re.findall(r"curl [^\n]*", "\n".join(_walkthrough_shell()))
    assert calls
    quiet = [c for c in calls if " -s " in c and "-sS" not in c]
    assert quiet == []
    # Only the over-budget example, which shows the refusal's body, goes without --fail-with-body.
    assert sum("--fail-with-body" not in c for c in calls) == 1
