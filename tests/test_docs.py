"""The README and docs/ hold their shape: a short README with the two commands and the
screenshot, pages under 300 lines that open with what a reader finds there, no heading twice
in one file, and every relative link (with its #anchor) pointing at something that exists.
Reads the files only; no model."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)
CODE_SPAN = re.compile(r"`+[^`\n]*`+")
HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*$", re.M)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:[ \t]+\"[^\"]*\")?\)")


def prose(path: Path) -> str:
    """The file without its fenced code blocks (a shell comment there is no heading)."""
    return FENCE.sub("", path.read_text(encoding="utf-8"))


def headings(path: Path) -> list[str]:
    return [m.group(2).strip() for m in HEADING.finditer(prose(path))]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def links(path: Path) -> list[str]:
    return LINK.findall(CODE_SPAN.sub("", prose(path)))


def test_readme_is_short_and_keeps_the_two_commands():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    assert "make run" in text and "make test" in text


def test_readme_shows_the_committed_screenshot():
    assert "docs/screenshot.png" in README.read_text(encoding="utf-8")
    shot = ROOT / "docs" / "screenshot.png"
    assert shot.is_file() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.name)
def test_page_is_short_and_opens_with_what_it_holds(page):
    lines = page.read_text(encoding="utf-8").splitlines()
    assert len(lines) < 300, f"{page.name}: {len(lines)} lines"
    first = lines[0].strip() if lines else ""
    assert first and not first.startswith(("#", "!", "|", "-", "```")), \
        f"{page.name} must open with a line saying what a reader finds there"


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda p: p.name)
def test_no_heading_twice_in_one_file(path):
    seen = headings(path)
    twice = sorted({h for h in seen if seen.count(h) > 1})
    assert not twice, f"{path.name}: {twice}"


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda p: p.name)
def test_relative_links_point_at_what_exists(path):
    broken = []
    for link in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", link, re.I):  # http:, https:, mailto:
            continue
        target, _, anchor = link.partition("#")
        file = (path.parent / target).resolve() if target else path
        if not file.exists():
            broken.append(link)
        elif anchor and file.suffix == ".md" and anchor not in {slug(h) for h in headings(file)}:
            broken.append(link)
    assert not broken, f"{path.name}: {broken}"


def test_slug_follows_github():
    assert slug("Quantized weights (`--target-quant`)") == "quantized-weights---target-quant"
    assert slug("The draft's window") == "the-drafts-window"
    assert slug("benchmark.py") == "benchmarkpy"
