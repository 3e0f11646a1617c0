"""The claims audit (claims.yml): each sentence is still on its page, and its assertion is
still in the block that prints what the sentence describes (issue 19).

A sentence that says how a result behaves is only as true as the check behind it. The
audit names, for every such sentence, the block that prints the result and the `assert`
in it; the page suite runs that block, so a change that makes the sentence false fails
the page. This test keeps the audit itself from going stale: a sentence reworded, a block
rewritten or an assertion dropped fails here, naming the entry.
"""

from __future__ import annotations

import codeop
import re
from pathlib import Path

import pytest
import yaml
from prose import DOCS, normalized, read, topic_pages

ROOT = Path(__file__).resolve().parents[2]
CLAIMS = yaml.safe_load((ROOT / "claims.yml").read_text(encoding="utf-8"))
FIELDS = {"sentence", "block", "assert"}


def assert_lines(source: str) -> list[str]:
    """Each assert statement of a block, its continuation lines joined, prompts removed."""
    lines = [re.sub(r"^(?:>>>|\.\.\.)(?: |$)", "", line) for line in source.splitlines()]
    statements = []
    for i, line in enumerate(lines):
        if not line.strip().startswith("assert "):
            continue
        indent = len(line) - len(line.lstrip())
        statement = line  # unless a longer run of lines parses
        for end in range(i + 1, len(lines) + 1):  # the shortest run of lines that parses
            text = "\n".join(x[indent:] for x in lines[i:end])
            try:
                if codeop.compile_command(text, symbol="exec") is not None:
                    statement = text
                    break
            except SyntaxError:
                continue
        statements.append(" ".join(statement.split()))
    return statements


def test_the_audit_covers_every_topic_page():
    pages = {p.relative_to(DOCS).as_posix() for p in topic_pages()}
    assert set(CLAIMS) == pages, (
        f"pages without an audit: {sorted(pages - set(CLAIMS))}; "
        f"audits of no page: {sorted(set(CLAIMS) - pages)}"
    )
    empty = [page for page, claims in CLAIMS.items() if not claims]
    assert not empty, f"pages whose claims were not audited: {empty}"


@pytest.mark.parametrize("page_name", sorted(CLAIMS))
def test_each_claim_is_on_its_page_and_asserted_in_its_block(page_name):
    page = read(DOCS / page_name)
    prose = normalized(page.prose())
    problems = []
    for i, claim in enumerate(CLAIMS[page_name] or []):
        where = f"{page_name} claim {i + 1}"
        if set(claim) != FIELDS:
            problems.append(f"{where}: fields are {sorted(claim)}, expected {sorted(FIELDS)}")
            continue
        if normalized(claim["sentence"]) not in prose:
            problems.append(f"{where}: the sentence is not on the page: {claim['sentence']!r}")
        blocks = page.block_with(claim["block"])
        if len(blocks) != 1:
            problems.append(
                f"{where}: {claim['block']!r} is in {len(blocks)} Python blocks of the page, "
                "not exactly one"
            )
            continue
        wanted = " ".join(claim["assert"].split())
        if not wanted.startswith("assert "):
            problems.append(f"{where}: {wanted!r} is not an assert statement")
        elif not any(wanted in " ".join(s.split()) for s in assert_lines(blocks[0].source)):
            problems.append(f"{where}: the block has no assertion {wanted!r}")
    assert not problems, "\n".join(problems)


def test_assert_lines_reads_pycon_and_python():
    source = ">>> assert a < b, 'x'\n>>> x = 1\n    assert (c ==\n            d)\nprint(1)\n"
    assert assert_lines(source) == ["assert a < b, 'x'", "assert (c == d)"]
    wrapped = "assert all(\n    x > 0\n    for x in xs\n), 'all positive'\nassert (\n    n == 1)\n"
    assert assert_lines(wrapped) == [
        "assert all( x > 0 for x in xs ), 'all positive'",
        "assert ( n == 1)",
    ]
