"""Every written topic page ends with exercises whose solutions run and check their answer.

The page format (issue 13): a `## Exercises` section; in it each exercise is a `### n. Title`
heading, the question, then a collapsed `??? success "Solution"` block holding the answer and
an executed ```python (or ```pycon) block that checks it. An exercise is one `### ` heading of
that section. The solution's code runs in the page suite like every other block (its page's
namespace, in page order), so a wrong answer fails there; this file checks that there is one
to run.
"""

from __future__ import annotations

import doctest
import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "hooks"))

import curriculum as cur  # noqa: E402
from pages import INFO, SKIP  # noqa: E402

PAGES = cur.written_pages(cur.load(), ROOT / "docs")
MIN_EXERCISES = 2

SECTION = re.compile(r"^## Exercises[ \t]*$(?P<body>.*?)(?=^## |\Z)", re.MULTILINE | re.DOTALL)
EXERCISE = re.compile(r"^### (?P<title>.+)$", re.MULTILINE)
SOLUTION = re.compile(r'^(?P<indent>[ \t]*)\?\?\?\+? success "Solution"[ \t]*$', re.MULTILINE)
# A whole ```python or ```pycon block (its info line as pages.py reads it), up to its closing fence.
FENCE = re.compile(
    r"^[ \t]*(?P<fence>`{3,}|~{3,})[ \t]*"
    + INFO.pattern
    + r"(?P<source>.*?)^[ \t]*(?P=fence)[ \t]*$",
    re.MULTILINE | re.DOTALL,
)
ASSERT = re.compile(r"^[ \t]*assert\b", re.MULTILINE)


@dataclass(frozen=True)
class Exercise:
    title: str
    solutions: list[str]  # the text of each `??? success "Solution"` block, its indent kept


def exercises(markdown: str) -> list[Exercise]:
    """The exercises of a page: each `### ` heading of its `## Exercises` section."""
    section = SECTION.search(markdown)
    if section is None:
        return []
    body = section["body"]
    heads = list(EXERCISE.finditer(body))
    ends = [head.start() for head in heads[1:]] + [len(body)] * bool(heads)
    return [
        Exercise(head["title"].strip(), _solutions(body[head.end() : end]))
        for head, end in zip(heads, ends, strict=True)
    ]


def _solutions(text: str) -> list[str]:
    """The body of each solution block: the lines after its opening, indented deeper than it."""
    blocks = []
    for opening in SOLUTION.finditer(text):
        depth = len(opening["indent"])
        lines = []
        for line in text[opening.end() :].split("\n")[1:]:
            if line.strip() and len(line) - len(line.lstrip()) <= depth:
                break
            lines.append(line)
        blocks.append("\n".join(lines))
    return blocks


def problems(solution: str) -> list[str]:
    """What a solution lacks: executed code, a check. Empty when it has both.

    Executed code is a ```python or ```pycon fence that no `<!-- skip: next -->` turns off
    (a conditional `skip: start if(...)` region still runs, in the session it names). A check
    is an `assert` in a python block, or a pycon example with an expected output other than
    a bare `...`, which would match anything.
    """
    executed, checked = False, False
    for block in FENCE.finditer(solution):
        line_above = solution[: block.start()].rstrip().rpartition("\n")[2]
        skip = SKIP.search(line_above)
        if skip and skip["action"] == "next":
            continue
        executed = True
        if block["language"] == "python":
            checked = checked or bool(ASSERT.search(block["source"]))
        else:
            examples = doctest.DocTestParser().get_examples(textwrap.dedent(block["source"]))
            checked = checked or any(e.want.strip() not in ("", "...") for e in examples)
    found = []
    if not executed:
        found.append("has no executed ```python or ```pycon block")
    elif not checked:
        found.append("checks nothing: no `assert`, no pycon output other than `...`")
    return found


@pytest.mark.parametrize("page", sorted(PAGES.values()))
def test_every_topic_page_has_exercises(page):
    found = exercises((ROOT / "docs" / page).read_text(encoding="utf-8"))
    assert len(found) >= MIN_EXERCISES, (
        f"{page} has {len(found)} exercises (`### ` headings under `## Exercises`); "
        f"a topic page needs at least {MIN_EXERCISES}"
    )


@pytest.mark.parametrize("page", sorted(PAGES.values()))
def test_every_exercise_has_a_solution_that_runs_and_checks(page):
    failures = []
    for number, exercise in enumerate(exercises((ROOT / "docs" / page).read_text("utf-8")), 1):
        name = f"{page}, exercise {number} ({exercise.title!r})"
        if len(exercise.solutions) != 1:
            failures.append(
                f'{name} has {len(exercise.solutions)} `??? success "Solution"` blocks, not one'
            )
        failures += [f"{name}: its solution {p}" for s in exercise.solutions for p in problems(s)]
    assert not failures, "\n".join(failures)


GOOD = """
## Exercises

### 1. Predict

How many?

??? success "Solution"
    Four.

    ```python
    assert 2 + 2 == 4
    ```

### 2. Predict again

??? success "Solution"
    ```pycon
    >>> 2 + 2
    4
    ```

## In a deployment
"""


def test_parser_reads_the_format():
    found = exercises("# A page\n\nText.\n" + GOOD + "\n### Not an exercise\n")
    assert [e.title for e in found] == ["1. Predict", "2. Predict again"]
    assert [problems(s) for e in found for s in e.solutions] == [[], []]
    assert exercises("# A page with no exercises\n") == []


@pytest.mark.parametrize(
    ("solution", "expected"),
    [
        ("    Four, as the page says.\n", "has no executed"),
        (
            '    <!-- skip: next "slow" -->\n    ```python\n    assert 2 + 2 == 4\n    ```\n',
            "has no executed",
        ),
        ("    ```text\n    assert 2 + 2 == 4\n    ```\n", "has no executed"),
        ("    ```python\n    print(2 + 2)\n    ```\n", "checks nothing"),
        ("    ```pycon\n    >>> 2 + 2\n    ...\n    ```\n", "checks nothing"),
        ("    ```pycon\n    >>> x = 2 + 2\n    ```\n", "checks nothing"),
    ],
    ids=["prose-only", "skipped", "not-python", "prints-only", "ellipsis-only", "no-output"],
)
def test_a_solution_without_code_or_check_is_caught(tmp_path, solution, expected):
    page = tmp_path / "page.md"
    page.write_text(
        f'## Exercises\n\n### 1. One\n\n??? success "Solution"\n{solution}\n'
        '### 2. Two\n\n??? success "Solution"\n    ```python\n    assert True\n    ```\n',
        encoding="utf-8",
    )
    first, second = exercises(page.read_text(encoding="utf-8"))
    assert [expected in p for p in problems(first.solutions[0])] == [True]
    assert problems(second.solutions[0]) == []


def test_an_exercise_without_a_solution_is_caught():
    found = exercises(
        "## Exercises\n\n### 1. Only a question\n\nWhy?\n\n### 2. Two\n\n"
        '??? success "Solution"\n    ```python\n    assert True\n    ```\n'
    )
    assert [len(e.solutions) for e in found] == [0, 1]
