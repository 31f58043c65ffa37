"""The documents stay usable: every citation of a document's section names a heading that
exists, every link to a heading of a document finds it, and docs/architecture.md stays a
map a newcomer reads in about 20 minutes (at most 3,000 words; subsystem detail lives in
docs/design/).

A citation is ``docs/<page>.md, <Heading>`` or ``docs/<page>.md, "<Heading>"`` (also
``docs/design/<page>.md, ...``), anywhere in the code, tests, benchmarks and documents; the
top-level pages are checked when the heading is quoted (``BENCHMARKS.md, "<Heading>"``). A
quoted heading must be one of the page's headings; an unquoted one must begin with one.
A heading also answers to its text before a colon and to a name in parentheses at its
end ("Direct writes: `POST /v1/staging`" answers to "Direct writes",
"`POST /v1/objects/batch` (Batched stores)" to "Batched stores")."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("client_lib", "cache_server", "storage", "tests", "bench", "docs", "examples")
SUFFIXES = {".py", ".md", ".toml", ".yml", ".yaml", ".txt", ".html", ".js"}
#: A line break and what continues a comment or a quote on the next line.
_BREAK = re.compile(r"[ \t]*\n[ \t]*(?:#+:?[ \t]*|>[ \t]*|//[ \t]*)?")
_QUOTED = r"(?:\"(?!<)([^\"\n]+)\"|'(?!<)([^'\n]+)'|“([^”\n]+)”)"
_CITATION = re.compile(r"docs/((?:design/)?[\w-]+\.md),[ \t]*"
                       r"(?:" + _QUOTED + r"|([^\s<\"'“].{0,80}))")
#: The top-level pages' sections, cited in quotes: ``BENCHMARKS.md, "<Heading>"``.
_TOP_CITATION = re.compile(r"(?<![\w/.])((?:BENCHMARKS|RELIABILITY|README)\.md),[ \t]*" + _QUOTED)
_LINK = re.compile(r"\]\(([\w./-]+\.md)#([\w-]+)\)")
_HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*$", re.M)
MAX_ARCHITECTURE_WORDS = 3000
MAX_DESIGN_PAGE_WORDS = 1700  # "about 1,500"


def _files() -> list[Path]:
    found = [p for p in ROOT.glob("*.md")]
    for top in SOURCES:
        found += [p for p in (ROOT / top).rglob("*") if p.suffix in SUFFIXES and p.is_file()
                  and "__pycache__" not in p.parts and not p.name.startswith(".")]
    return sorted(found)


def headings(page: Path) -> list[str]:
    """The names a page's headings answer to (backticks dropped)."""
    names: list[str] = []
    in_code = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
            continue
        match = None if in_code else _HEADING.match(line)
        if match is None:
            continue
        text = match.group(1).replace("`", "").strip()
        names.append(text)
        if ":" in text:
            names.append(text.split(":", 1)[0].strip())
        if paren := re.search(r"\(([^()]+)\)$", text):
            names.append(paren.group(1).strip())
    return names


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    in_code, found = False, set()
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and (match := _HEADING.match(line)):
            found.add(slug(match.group(1)))
    return found


def _cites(heading: str, names: list[str], quoted: bool) -> bool:
    heading = heading.replace("`", "").strip()
    if quoted:
        return heading in names
    return any(heading == n or (heading.startswith(n) and not heading[len(n)].isalnum())
               for n in names)


def broken_citations() -> list[str]:
    known: dict[str, list[str]] = {}
    broken = []
    for path in _files():
        text = _BREAK.sub(" ", path.read_text(errors="replace"))
        for match in _CITATION.finditer(text):
            page, double, single, curly, bare = match.groups()
            quoted = double or single or curly
            target = ROOT / "docs" / page
            if not target.exists():
                broken.append(f"{path.relative_to(ROOT)}: docs/{page} does not exist")
                continue
            names = known.setdefault(page, headings(target))
            if not _cites(quoted or bare, names, quoted is not None):
                cited = quoted if quoted is not None else bare[:50]
                broken.append(f"{path.relative_to(ROOT)}: docs/{page}, {cited!r}")
        for page, *quotes in _TOP_CITATION.findall(text):
            quoted = next(q for q in quotes if q)
            names = known.setdefault(page, headings(ROOT / page))
            if not _cites(quoted, names, quoted=True):
                broken.append(f"{path.relative_to(ROOT)}: {page}, {quoted!r}")
    return broken


def broken_links() -> list[str]:
    broken = []
    for path in _files():
        if path.suffix != ".md":
            continue
        for target, anchor in _LINK.findall(path.read_text()):
            page = (path.parent / target).resolve()
            if not page.exists() or anchor not in _anchors(page):
                broken.append(f"{path.relative_to(ROOT)}: {target}#{anchor}")
    return broken


def words(page: Path) -> int:
    return len(page.read_text().split())


def test_every_cited_section_exists() -> None:
    assert broken_citations() == []


def test_every_link_to_a_heading_finds_it() -> None:
    assert broken_links() == []


def test_the_architecture_page_reads_in_twenty_minutes() -> None:
    assert words(ROOT / "docs" / "architecture.md") <= MAX_ARCHITECTURE_WORDS


def test_design_pages_stay_small() -> None:
    pages = sorted((ROOT / "docs" / "design").glob("*.md"))
    assert pages
    assert {p.name: words(p) for p in pages if words(p) > MAX_DESIGN_PAGE_WORDS} == {}


def test_the_checks_can_fail(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n## Direct writes: `POST /v1/staging`\n\n"
                    "### `POST /v1/objects/batch` (Batched stores)\n\n```\n# not a heading\n```\n")
    names = headings(page)
    assert _cites("Direct writes", names, quoted=True)
    assert _cites("Batched stores", names, quoted=True)
    assert _cites("Direct writes, where the worker writes", names, quoted=False)
    assert not _cites("Direct", names, quoted=True)
    assert not _cites("Direct writesX", names, quoted=False)
    assert not _cites("not a heading", names, quoted=True)
    assert slug("Direct writes: `POST /v1/staging`") in _anchors(page)


def test_citations_are_found_across_lines_and_quotes() -> None:
    docs = "docs/"  # apart, so that this file cites nothing itself
    text = _BREAK.sub(" ", f'x ({docs}design/server-and-index.md,\n    # "The server\'s layers")'
                           f"\n{docs}protocol.md, Leases. {docs}architecture.md, <Heading>")
    found = [m.groups() for m in _CITATION.finditer(text)]
    assert found[0][:2] == ("design/server-and-index.md", "The server's layers")
    assert found[1][0] == "protocol.md" and found[1][4].startswith("Leases.")
    assert len(found) == 2
