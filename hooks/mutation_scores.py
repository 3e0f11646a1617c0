"""MkDocs hook: the mutation scores of the named components, as `nox -s mutation` measured them.

`nox -s mutation -- --record` (tests/mutation/score.py) writes `recordings/mutation.json`:
per module, the mutants mutmut made, how many its own tests killed, how many survived or
timed out, and the functions it left unmutated. A page's `<!-- mutation-scores -->` marker
becomes that table, with the tool, the machine, the date and the session's bar, all read
from the file, so the page shows the last recorded run and nothing typed by hand
(tests/site/test_mutation_page.py checks the built table against the file).
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "recordings" / "mutation.json"
MARKER = "<!-- mutation-scores -->"
HEADER = [
    "module",
    "its tests (and its doctests)",
    "mutants",
    "killed",
    "survived",
    "timed out",
    "score",
]


def load(path: Path = RESULTS) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def rows(results: dict) -> list[list[str]]:
    """The table's cells, row by row, as the page shows them."""
    found = []
    for m in results["modules"]:
        tests = ", ".join(f"`{Path(t).name}`" for t in m["tests"])
        found.append(
            [
                f"`{m['module']}`",
                tests,
                str(m["made"]),
                str(m["killed"]),
                str(m["survived"] + m["no_tests"]),
                str(m["timed_out"]),
                f"{m['killed'] / m['made']:.1%}",
            ]
        )
    return found


def scores(results: dict) -> str:
    """The Markdown the marker becomes."""
    lines = [
        "| " + " | ".join(HEADER) + " |",
        "|" + "|".join(["---"] * 2 + ["--:"] * (len(HEADER) - 2)) + "|",
        *("| " + " | ".join(row) + " |" for row in rows(results)),
    ]
    skipped = [
        f"`{m['module']}`: " + ", ".join(f"`{name}`" for name in m["not_mutated"])
        for m in results["modules"]
        if m["not_mutated"]
    ]
    minutes = results["seconds"] / 60
    return "\n".join(
        [
            *lines,
            "",
            f"Measured with {results['tool']} on {results['machine']}, {results['date']}: "
            f"{minutes:.0f} minutes for every module, one mutant at a time. The session fails "
            f"when a module's own tests kill fewer than {results['threshold']:.0%} of its mutants.",
            "",
            "mutmut leaves every decorated function unmutated (it mutates those decorated with "
            "`@staticmethod` or `@classmethod` only), so the Triton kernels (`@triton.jit`), "
            "properties and other decorated functions below keep their code in every mutant; "
            "their tests still run against the mutants of the code around them:",
            "",
            *(f"- {line}" for line in skipped),
            "",
            *survivors(results),
        ]
    )


def survivor_lines(results: dict) -> list[str]:
    """Each surviving mutant as `module:line`, the line, and what the mutant made of it."""
    return [
        f"`{m['module']}:{s['line']}`: `{s['code']}` → `{s['mutated']}`"
        for m in results["modules"]
        for s in m["survivors"]
    ]


def survivors(results: dict) -> list[str]:
    """The survivors, collapsed under the table: every one a reader can look up."""
    found = survivor_lines(results)
    return [
        f'??? note "The {len(found)} surviving mutants, line by line"',
        "",
        *(f"    - {line}" for line in found),
    ]


def on_page_markdown(markdown: str, page, config, files) -> str:
    if MARKER in markdown:
        return markdown.replace(MARKER, scores(load()))
    return markdown
