"""Every topic page's notebook holds the page's code in order, and runs as the page runs.

The notebooks are built from the pages (hooks/notebooks.py); here they are built again, the
same way, and checked like the pages:

- every page: each python block and each `>>>` example has its cell, in the page's order,
  with the page's code, and each exercise its solution, collapsed, under its question;
- executed (tests/site/notebook_run.py): in a fresh kernel on the session's device, top to
  bottom, every cell's output compared with what the page expects, under its doctest flags.
  The `tests` session executes the notebooks of the pages a change touched (the page or a
  file it includes, changed since the merge base with `origin`, or since `HEAD~` without
  one, committed or not, or new) and one fixed notebook; `nox -s notebooks`
  (LLMSERVE_NOTEBOOKS=all) executes all of them;
- a page broken on purpose fails its notebook too.
"""

from __future__ import annotations

import doctest
import os
import subprocess
import sys
import textwrap
from functools import cache
from pathlib import Path

import pytest
from nbclient.exceptions import CellExecutionError
from notebook_run import (
    differences,
    example_cells,
    example_source,
    execute,
    page_examples,
    page_notebook,
    same_code,
)
from pages import includes
from test_exercises import FENCE as SOLUTION_BLOCK
from test_exercises import exercises

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "hooks"))

import curriculum  # noqa: E402
import notebook_markdown as md  # noqa: E402
from notebooks import rendered  # noqa: E402
from page_blocks import read_page  # noqa: E402

DOCS = ROOT / "docs"
PAGES = sorted(DOCS / p for p in curriculum.written_pages(curriculum.load(), DOCS).values())
# Executed in every tests session, whatever changed: a short page, snippet included.
FIXED = DOCS / "stage-1" / "tokens-and-the-generation-loop.md"


def _git(*args: str) -> str | None:
    """What `git args` prints, or None where it fails (no git, no history, no remote)."""
    try:
        result = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    except FileNotFoundError:
        return None
    return result.stdout if result.returncode == 0 else None


@cache
def changed_files() -> set[str]:
    """Files changed since the merge base with origin (else since HEAD~), committed or not,
    and files git does not track yet; empty where there is no git history to compare."""
    base = None
    for upstream in ("origin/HEAD", "origin/main"):
        base = base or _git("merge-base", "HEAD", upstream)
    base = (base or _git("rev-parse", "HEAD~") or "").strip()
    if not base:
        return set()
    changed = (_git("diff", "--name-only", base) or "").split()
    untracked = (_git("ls-files", "--others", "--exclude-standard") or "").split()
    return set(changed) | set(untracked)


def touched(page: Path) -> bool:
    """Whether a change touched what `page` shows: the page, or a file it includes (its
    recordings are what the notebook shows, not what it runs)."""
    text = page.read_text(encoding="utf-8")
    uses = {page, *(ROOT / path for path, _ in includes(text))}
    return any(path.relative_to(ROOT).as_posix() in changed_files() for path in uses)


def to_execute() -> list[Path]:
    if os.environ.get("LLMSERVE_NOTEBOOKS") == "all":
        return PAGES
    return [p for p in PAGES if p == FIXED or touched(p)]


def page_id(page: Path) -> str:
    return page.relative_to(DOCS).as_posix()


def test_the_sites_page_links_a_figure_that_the_notebook_carries():
    site = md.Site("https://example.test/", "stage-7/scheduler-simulator.md", lambda p: "<svg/>")
    ((_, source, attachments),) = md.cells("A timeline: ![Timeline](figures/timeline.svg)", site)
    cell = {"cell_type": "markdown", "metadata": {}, "source": source, "attachments": attachments}
    data = {"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (shown,) = rendered(data, site)["cells"]
    # The page is stage-7/notebooks/scheduler-simulator/; the figure stage-7/figures/.
    assert shown["source"] == "A timeline: ![Timeline](../../figures/timeline.svg)"
    assert "attachments" not in shown
    assert data["cells"][0]["attachments"] == {"timeline.svg": {"image/svg+xml": "PHN2Zy8+"}}


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_example_has_its_cell_in_order(page):
    cells = [(w, example_source(c)) for w, c in example_cells(page_notebook(page))]
    shown = [(where, source) for where, source in cells if source is not None]
    expected = page_examples(page)
    assert [w for w, _ in shown] == [(e.block, e.number) for e in expected]
    for (where, source), example in zip(shown, expected, strict=True):
        assert same_code(example.source, source), f"block {where[0]}, example {where[1]}"


def solution_sources(solution: str) -> list[str]:
    """The code of each example of a solution, as the suite runs it."""
    found = []
    for block in SOLUTION_BLOCK.finditer(solution):
        source = textwrap.dedent(block["source"])
        if block["language"] == "python":
            found.append(source)
        else:
            found += [e.source for e in doctest.DocTestParser().get_examples(source)]
    return found


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_exercise_has_its_solution_collapsed_under_it(page):
    data = page_notebook(page)
    cells = data["cells"]
    found = exercises(read_page(page)[1])
    assert found, f"{page.name} has no exercises"
    heads = [
        next(i for i, c in enumerate(cells) if f"### {exercise.title}\n" in c["source"] + "\n")
        for exercise in found
    ]
    assert heads == sorted(heads), "the exercises are out of order"
    for exercise, start, end in zip(found, heads, [*heads[1:], len(cells)], strict=True):
        under = cells[start:end]
        details = [c for c in under if "<details><summary>Solution</summary>" in c["source"]]
        assert details, f"{exercise.title!r} has no collapsed solution"
        code = [  # the solution's examples: folded, and not the question's
            c
            for c in under
            if "llmserve" in c["metadata"]
            and example_source(c) is not None
            and c["metadata"].get("jupyter", {}).get("source_hidden")
        ]
        assert under.index(details[0]) < under.index(code[0]), exercise.title
        expected = [s for solution in exercise.solutions for s in solution_sources(solution)]
        assert len(code) == len(expected), exercise.title
        for cell, source in zip(code, expected, strict=True):
            assert same_code(source, example_source(cell)), exercise.title


@pytest.mark.slow
@pytest.mark.parametrize("page", to_execute(), ids=page_id)
def test_the_notebook_runs_as_its_page(page, tmp_path):
    executed = execute(page_notebook(page), tmp_path)
    assert differences(page, executed) == []


def broken_copy(tmp_path: Path) -> tuple[Path, tuple[int, int]]:
    """FIXED, copied outside docs/, with its first expected output that is not `...`
    changed: (the copy, the (block, example) that now fails)."""
    text = FIXED.read_text(encoding="utf-8")
    example = next(e for e in page_examples(FIXED) if e.want.strip() not in ("", "..."))
    first_line = example.want.split("\n", 1)[0]
    at = text.index(example.source.split("\n", 1)[0])
    broken = text[:at] + text[at:].replace(first_line, "not what the block prints", 1)
    copy = tmp_path / FIXED.name
    copy.write_text(broken, encoding="utf-8")
    return copy, (example.block, example.number)


@pytest.mark.slow
def test_a_page_broken_on_purpose_fails_its_notebook(tmp_path):
    copy, (block, number) = broken_copy(tmp_path)
    data = page_notebook(copy)
    ids = [c["id"] for (b, n), c in example_cells(data) if (b, n) == (block, number)]
    executed = execute(data, tmp_path, stop_after=int(ids[0].removeprefix("cell-")))
    found = differences(copy, executed)
    assert len(found) == 1 and found[0].startswith(f"{copy.name}, block {block}, ")
    assert "not what the block prints" in found[0]

    # And a block that raises stops the notebook, as it fails the page.
    first = next(c for c in data["cells"] if "llmserve" in c["metadata"])
    first["source"] += "\nraise RuntimeError('broken on purpose')"
    with pytest.raises(CellExecutionError, match="broken on purpose"):
        execute(data, tmp_path, stop_after=int(first["id"].removeprefix("cell-")))


@pytest.mark.slow
def test_a_failed_check_says_where_the_numbers_came_from(tmp_path):
    """An `assert` that fails in a notebook still fails its cell, and says that the page's
    numbers came from another machine (a reader's may be slower, or busier)."""
    data = page_notebook(FIXED)
    setup = [
        c for c in data["cells"] if c["cell_type"] == "code" and "llmserve" not in c["metadata"]
    ]
    check = {
        **setup[-1],
        "id": "check",
        "source": "assert 2 * 0.5 < 0.1, 'slower than measured'",
        "metadata": {"tags": ["raises-exception"]},  # nbclient goes on: its outputs are read
    }
    outputs = execute({**data, "cells": [*setup, check]}, tmp_path).cells[-1].outputs
    errors = [o for o in outputs if o.output_type == "error"]
    assert [(o.ename, o.evalue) for o in errors] == [("AssertionError", "slower than measured")]
    note = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "came from another machine" in note, outputs
