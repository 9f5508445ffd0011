"""Every family in ``FORMATS`` is documented: a row of the README's table and of docs/formats.md."""

from __future__ import annotations

import re
from pathlib import Path

from workers.decode.constraints.formats import FORMATS as GRAMMAR_FORMATS
from workers.parser import FORMATS

ROOT = Path(__file__).resolve().parents[2]


def _rows(path: Path) -> set[str]:
    return set(re.findall(r"^\| `([a-z0-9_]+)` \|", path.read_text(), flags=re.MULTILINE))


def _cells(path: Path) -> set[str]:
    """Every cell holding one backticked name (the README's table has two pairs of columns)."""
    return set(re.findall(r"\| `([a-z0-9_]+)` \|", path.read_text()))


def test_readme_and_docs_list_every_family() -> None:
    assert _cells(ROOT / "README.md") >= set(FORMATS)
    assert _rows(ROOT / "docs" / "formats.md") - {"tool_format"} == set(FORMATS)  # less the header


def test_every_family_has_a_grammar() -> None:
    assert set(GRAMMAR_FORMATS) == set(FORMATS)
