"""Included sections: every marked section is shown on a page, and every include finds one.

A module marks code for the site with `# --8<-- [start:name]` ... `# --8<-- [end:name]`
and a page shows it with `--8<-- "path:name"` (pymdownx.snippets). A section no page
includes is noise in the code. Of the other mistakes, pymdownx catches only a missing
section, and only when the site is built; a start without an end includes the rest of the
file, an end before its start includes nothing, and a name marked twice includes only its
first place. These tests name the file and the section, without a build.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from pages import ROOT, includes, pages

# Where included code lives; the package's data/ (model weights) holds no markers.
SOURCES = ("src", "snippets", "benchmarks", "clients", "docs")
SUFFIXES = {".py", ".ts", ".js", ".txt", ".json", ".toml", ".sh"}
# A marker line as pymdownx.snippets reads it, in a `#` or `//` comment.
MARKER = re.compile(
    r"^[ \t]*(?:#|//)[ \t]*-+8<-+[ \t]+\[[ \t]*(?P<kind>start|end)[ \t]*:[ \t]*"
    r"(?P<name>[a-z][-_0-9a-z]*)[ \t]*\][ \t]*$",
    re.IGNORECASE | re.MULTILINE,
)


def source_files() -> list[Path]:
    return sorted(
        path
        for root in SOURCES
        for path in (ROOT / root).rglob("*")
        if path.suffix in SUFFIXES and path.is_file()
    )


def markers(text: str) -> list[tuple[str, str]]:
    """(kind, name) of every section marker in a file, in order."""
    return [(m["kind"].lower(), m["name"]) for m in MARKER.finditer(text)]


def sections() -> dict[tuple[str, str], Path]:
    """Every (repository-relative path, section name) that some file marks."""
    found = {}
    for path in source_files():
        for kind, name in markers(path.read_text(encoding="utf-8")):
            if kind == "start":
                found[(path.relative_to(ROOT).as_posix(), name)] = path
    return found


def included() -> dict[tuple[str, str], list[str]]:
    """Every (path, section) some page includes, with the pages that include it."""
    found: dict[tuple[str, str], list[str]] = {}
    for page in pages():
        for path, section in includes(page.read_text(encoding="utf-8")):
            if section is not None:
                found.setdefault((path, section), []).append(page.relative_to(ROOT).as_posix())
    return found


def test_the_scan_finds_the_markers_and_includes_it_checks():
    """Guards the two tests below against passing because a pattern matches nothing."""
    assert ("src/llmserve_ref/engine/scheduler.py", "schedule") in sections()
    assert ("src/llmserve_ref/engine/scheduler.py", "schedule") in included()


def test_every_section_is_included_by_a_page():
    unused = sorted(f"{path}:{name}" for path, name in sections().keys() - included().keys())
    assert unused == [], (
        f"{len(unused)} sections no page includes: {unused}; show each on the page it "
        'teaches (--8<-- "path:name") or delete its two marker lines'
    )


def test_every_include_names_a_section_that_exists():
    marked = sections()
    missing = {
        f"{path}:{name}": where
        for (path, name), where in included().items()
        if (path, name) not in marked
    }
    assert missing == {}, (
        f"includes of sections no file marks (page lists): {missing}; fix the name, or mark "
        "the section in the file with # --8<-- [start:name] / # --8<-- [end:name]"
    )


def test_includes_name_sections_not_line_numbers():
    """`path:10:20` breaks silently the day the file above line 10 changes."""
    numbered = [
        (page.name, f"{path}:{section}")
        for page in pages()
        for path, section in includes(page.read_text(encoding="utf-8"))
        if section is not None and section[:1].isdigit()
    ]
    assert numbered == [], f"includes by line number: {numbered}; mark a section instead"


def pairing_problems(text: str) -> list[str]:
    """What is wrong with a file's markers: unpaired, misordered or repeated."""
    problems, open_sections, seen = [], [], Counter()
    for kind, name in markers(text):
        if kind == "start":
            if name in open_sections:
                problems.append(f"[start:{name}] twice without an [end:{name}]")
            seen[name] += 1
            open_sections.append(name)
        elif name in open_sections:
            open_sections.remove(name)
        else:
            problems.append(f"[end:{name}] without a [start:{name}] before it")
    problems += [f"[start:{name}] without an [end:{name}]" for name in open_sections]
    problems += [f"[start:{name}] marks two places" for name, count in seen.items() if count > 1]
    return problems


def test_pairing_problems_are_found():
    good = "# --8<-- [start:a]\nx\n# --8<-- [start:b]\ny\n# --8<-- [end:b]\n# --8<-- [end:a]\n"
    assert pairing_problems(good) == []
    assert pairing_problems("# --8<-- [start:a]\nx\n") == ["[start:a] without an [end:a]"]
    assert pairing_problems("# --8<-- [end:a]\n# --8<-- [start:a]\n") == [
        "[end:a] without a [start:a] before it",
        "[start:a] without an [end:a]",
    ]


def test_markers_pair_up():
    problems = {
        path.relative_to(ROOT).as_posix(): found
        for path in source_files()
        if (found := pairing_problems(path.read_text(encoding="utf-8")))
    }
    assert problems == {}
