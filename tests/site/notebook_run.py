"""Run a page's notebook and hold it to the page: what the suite checks of every notebook.

`execute` runs a notebook (hooks/notebooks.py) top to bottom in a fresh kernel, as a reader's
"Run all" does, without its install cell: the suite runs the package it has installed. A cell
that raises stops it, as a failing block fails its page. `differences` then compares the
output of every cell with what the page expects of its example, under the page's doctest
flags: the page is read again here by the suite's own pipeline (tests/pages.py, Sybil's
lexer), not by the generator, so a notebook that lost, reordered or changed a block differs.
"""

from __future__ import annotations

import ast
import copy
import doctest
import io
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from pages import CODE_BLOCKS, OPTIONFLAGS, ROOT, PageDocument
from sybil.evaluators.doctest import OutputChecker

sys.path.insert(0, str(ROOT / "hooks"))
import curriculum
import notebook_markdown
from notebooks import SKIP_EXECUTION, notebook

SITE_URL = "http://127.0.0.1:8000/"
CELL_TIMEOUT = 600  # seconds: the longest page block takes well under a minute here
GUARD = "if "  # a conditionally skipped example: `if <condition>:\n    print(...)\nelse:\n`


@dataclass(frozen=True)
class PageExample:
    """What the page runs, as the suite reads it: one python block or one pycon example."""

    block: int
    number: int
    language: str
    source: str
    want: str
    exc_msg: str | None


def page_examples(page: Path) -> list[PageExample]:
    """Every example of `page`, in order, read by the suite's pipeline (Sybil's lexer)."""
    found = []
    document = PageDocument.parse(str(page))
    for index, region in enumerate(CODE_BLOCKS.lexer(document)):
        source, language = region.lexemes["source"], region.lexemes["language"]
        if language == "python":
            found.append(PageExample(index, 0, language, source, "", None))
            continue
        for number, e in enumerate(doctest.DocTestParser().get_examples(source)):
            found.append(PageExample(index, number, language, e.source, e.want, e.exc_msg))
    return found


def page_notebook(page: Path, wheel_url: str = SITE_URL + "downloads/x.whl") -> dict:
    """The notebook the build makes of `page` (a topic page, or a copy of one elsewhere)."""
    graph = curriculum.load()
    title = next((t.title for t in graph.topics if t.slug == page.stem), page.stem)
    docs = ROOT / "docs"
    uri = page.resolve().relative_to(docs).as_posix() if page.is_relative_to(docs) else page.name
    return notebook(page, title, notebook_markdown.Site(SITE_URL, uri), wheel_url)


def execute(data: dict, cwd: Path, stop_after: int | None = None) -> nbformat.NotebookNode:
    """`data` run in a fresh kernel in `cwd`, without the install cell, up to cell
    `stop_after` (a cell id's number) if given; a cell that raises raises here."""
    cells = [c for c in data["cells"] if SKIP_EXECUTION not in c["metadata"].get("tags", [])]
    if stop_after is not None:
        cells = [c for c in cells if int(c["id"].removeprefix("cell-")) <= stop_after]
    run = nbformat.from_dict(copy.deepcopy({**data, "cells": cells}))
    client = NotebookClient(
        run,
        timeout=CELL_TIMEOUT,
        kernel_name="python3",  # jupyter_client starts it with this interpreter
        resources={"metadata": {"path": str(cwd)}},  # the kernel inherits os.environ
    )
    client.execute()
    return run


def cell_output(cell) -> str:
    """What a code cell printed and showed, as doctest sees a prompt's output."""
    text = []
    for output in cell.get("outputs", []):
        if output["output_type"] == "stream" and output["name"] == "stdout":
            text.append(output["text"])
        elif output["output_type"] in ("execute_result", "display_data"):
            text.append(output["data"].get("text/plain", "") + "\n")
        elif output["output_type"] == "error":
            text.append(f"{output['ename']}: {output['evalue']}\n")
    return "".join(text)


def example_source(cell) -> str | None:
    """The page's code in a cell: a listing's, a guarded cell's body, a script's; None for
    the `%run` that runs a script."""
    source = cell["source"]
    if cell["cell_type"] == "markdown":  # a listing: the example inside its fence
        body = source.split("\n", 1)[1].rsplit("\n", 1)[0]
        if source.startswith("```pycon"):
            return "".join(e.source for e in doctest.DocTestParser().get_examples(body))
        return body + "\n"
    if source.startswith("%run -n "):
        return None
    if source.startswith("%%writefile "):
        return source.split("\n", 1)[1] + "\n"
    if source.startswith(GUARD) and "\nelse:\n" in source:
        return unguarded(source)
    return source + "\n"


def unguarded(source: str) -> str:
    """A guarded cell's body, as the page shows it."""
    indented = source.split("\nelse:\n", 1)[1]
    inside = set()  # lines inside a multi-line string, which the generator left as they were
    for token in tokenize.generate_tokens(io.StringIO(indented).readline):
        if token.type == tokenize.STRING and token.end[0] > token.start[0]:
            inside.update(range(token.start[0] + 1, token.end[0] + 1))
    lines = indented.split("\n")
    body = "\n".join(
        line if n in inside else line.removeprefix("    ") for n, line in enumerate(lines, 1)
    )
    return body.rstrip("\n") + "\n"


def same_code(page: str, cell: str) -> bool:
    """Whether a cell holds the page's code: the same text, or for a guarded cell (whose
    body is re-indented), the same syntax tree."""
    if page == cell:
        return True
    try:
        return ast.dump(ast.parse(page)) == ast.dump(ast.parse(cell))
    except SyntaxError:
        return False


def example_cells(data) -> list[tuple[tuple[int, int], object]]:
    """((block, example), cell) for each cell that holds an example of the page."""
    return [
        ((c["metadata"]["llmserve"]["block"], c["metadata"]["llmserve"]["example"]), c)
        for c in data["cells"]
        if "llmserve" in c["metadata"]
    ]


def differences(page: Path, executed) -> list[str]:
    """Every cell whose output the page's example does not expect (doctest's comparison,
    under the page's flags), or whose code is not the example's."""
    checker = OutputChecker()
    expected = {(e.block, e.number): e for e in page_examples(page)}
    found = []
    for where, cell in example_cells(executed):
        example, got = expected[where], cell_output(cell)
        name = f"{page.name}, block {where[0]}, example {where[1]}"
        source = example_source(cell)
        if source is not None and not same_code(example.source, source):
            found.append(f"{name}: the cell's code is not the page's")
        if example.language == "python" or cell["cell_type"] == "markdown":
            continue
        if cell["source"].startswith(GUARD) and got.startswith("Skipped: "):
            continue  # the page's condition held: the suite skips this example too
        want = example.want if example.exc_msg is None else example.exc_msg
        module = want.split(":", 1)[0].rpartition(".")[0]
        if example.exc_msg is not None and module:  # IPython names the class, not its module
            got = f"{module}.{got}"
        if not checker.check_output(want, got, OPTIONFLAGS):
            found.append(f"{name}:\n  expected:\n{want}  got:\n{got}")
    return found
