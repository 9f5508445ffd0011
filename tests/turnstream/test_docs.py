"""The README and docs/ cannot drift from the code, nor point nowhere.

The README is the user's document (at most 350 lines); the reference lives in docs/, found from it
through links that must resolve, and docs/configuration.md is generated from runtime/config.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from turnstream.docs import CONFIGURATION_PAGE, configuration_page

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "training" / "README.md"]
README_MAX_LINES = 350
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.DOTALL | re.MULTILINE)
_CODE = re.compile(r"`[^`\n]*`")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, markup and punctuation dropped, spaces as dashes."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text.replace("`", ""))
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading's anchor on ``page`` (a repeated heading gets -1, -2, ... as on GitHub)."""
    seen: dict[str, int] = {}
    out = set()
    for line in _FENCE.sub("", page.read_text()).splitlines():
        m = re.match(r"#{1,6} (.+)", line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(page: Path) -> list[str]:
    """The relative link targets of ``page``, outside code blocks and code spans."""
    text = _CODE.sub("", _FENCE.sub("", page.read_text()))
    return [a or b for a, b in _LINK.findall(text) if not re.match(r"[a-z]+:", a or b)]


def broken(page: Path) -> list[str]:
    out = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            out.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            out.append(f"{target}: no such heading")
    return out


def test_the_readme_stays_short() -> None:
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines: move reference material to docs/"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    assert broken(page) == []


def test_the_readme_leads_to_every_docs_page() -> None:
    """Each page of docs/ is linked from the README or from a page the README links."""
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in links(ROOT / "README.md") if t.partition("#")[0]}
    reachable = set(linked)
    for page in linked:
        if page.suffix == ".md":
            reachable |= {(page.parent / t.partition("#")[0]).resolve() for t in links(page) if t.partition("#")[0]}
    missing = [p.name for p in (ROOT / "docs").glob("*.md") if p.resolve() not in reachable]
    assert missing == []


def test_the_configuration_page_is_generated_from_the_code() -> None:
    assert CONFIGURATION_PAGE.read_text() == configuration_page(), \
        "docs/configuration.md is stale: python -m turnstream.docs configuration"


def test_the_link_checker_finds_a_broken_anchor_and_a_missing_file(tmp_path: Path) -> None:
    page = tmp_path / "a.md"
    (tmp_path / "b.md").write_text("# Serving a real model\n\n## The `gpu-check` (one command)\n")
    page.write_text("[ok](b.md#serving-a-real-model) [ok](b.md#the-gpu-check-one-command) [bad](b.md#nothing)"
                    " [gone](c.md) `[code](nowhere.md)` [web](https://example.com)\n")
    assert broken(page) == ["b.md#nothing: no such heading", "c.md: no such file"]
