"""The pipeline itself: no block escapes, skips say why, and drift makes the suite fail."""

from __future__ import annotations

import re
import shutil
import tempfile
import textwrap
from pathlib import Path

import pytest
from pages import (
    CODE_BLOCKS,
    ROOT,
    PageDocument,
    fences,
    includes,
    mkdocs_config,
    page_sybil,
    pages,
    resolve_includes,
    skips,
)
from sybil.example import SybilFailure

# Blocks that cannot run in CI (a Mac, a GPU, an outside server) are skipped with a
# visible reason; they must stay few. Raise this only with a reason in the commit.
MAX_SKIPPED_BLOCKS = 12


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_python_fence_is_collected(page: Path):
    """Sybil silently ignores a fence it does not recognize (`py`, `python3`, ...)."""
    document = PageDocument.parse(str(page), CODE_BLOCKS)
    seen = len(fences(document.text))
    collected = len(CODE_BLOCKS.blocks(document))
    assert collected == seen, (
        f"{page.name}: {seen} Python fences, {collected} collected; write every Python "
        'fence as ```python or ```pycon (attributes such as title="..." may follow)'
    )


def test_skips_have_visible_reasons_and_stay_few():
    total = 0
    for page in pages():
        text = resolve_includes(page.read_text(encoding="utf-8"))
        visible = re.sub(r"<!--.*?-->", "", text, flags=re.S)
        for action, reason in skips(text):
            if action == "end":
                continue
            total += 1
            assert reason, f'{page.name}: a skip without a reason; write <!-- skip: next "why" -->'
            message = re.findall(r'"([^"]+)"|\'([^\']+)\'', reason)
            assert message, f"{page.name}: skip reason {reason!r} has no quoted message"
            shown = next(m for pair in message for m in pair if m)
            assert shown in visible, (
                f"{page.name}: skip reason {shown!r} is not visible on the page"
            )
    assert total <= MAX_SKIPPED_BLOCKS


def run_page(tmp_path: Path, body: str) -> list[Exception]:
    """Evaluate a throwaway page through the real pipeline; return the failures."""
    page = tmp_path / "page.md"
    page.write_text(textwrap.dedent(body), encoding="utf-8")
    document = page_sybil().parse(page)
    failures = []
    for example in document.examples():
        try:
            example.evaluate()
        except (SybilFailure, Exception) as error:
            failures.append(error)
    return failures


def test_drift_a_wrong_output_fails(tmp_path):
    failures = run_page(
        tmp_path,
        """\
        ```pycon
        >>> 6 * 7
        41
        ```
        """,
    )
    assert len(failures) == 1 and "Expected:\n    41\nGot:\n    42" in str(failures[0])


def test_drift_in_included_code_fails(tmp_path):
    """A page whose block includes package code runs that code as shown."""
    # Includes resolve inside the repository only (as on the site), so the module lives there.
    module = Path(tempfile.mkdtemp(dir=ROOT / "tests", prefix=".drift-")) / "module.py"
    try:
        module.write_text("# --8<-- [start:answer]\nANSWER = 41\n# --8<-- [end:answer]\n")
        failures = run_page(
            tmp_path,
            f"""\
            ```python
            --8<-- "{module.relative_to(ROOT).as_posix()}:answer"
            ```

            ```pycon
            >>> ANSWER
            42
            ```
            """,
        )
    finally:
        shutil.rmtree(module.parent)
    assert len(failures) == 1 and "Got:\n    41" in str(failures[0])


def test_blocks_share_one_namespace_in_page_order(tmp_path):
    assert (
        run_page(
            tmp_path,
            """\
        ```python
        total = 40
        ```

        ```python title="adds.py"
        total += 2
        ```

        ```pycon
        >>> total
        42
        ```
        """,
        )
        == []
    )


def test_a_py_fence_is_caught_as_uncollected(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```py\nprint('never run')\n```\n\n```python\nx = 1\n```\n")
    document = PageDocument.parse(str(page), CODE_BLOCKS)
    assert len(fences(document.text)) == 2 and len(CODE_BLOCKS.blocks(document)) == 1


def test_included_files_are_watched_by_mkdocs_serve():
    """`mkdocs serve` rebuilds when anything a page includes changes."""
    config = mkdocs_config()
    watched = [ROOT / w for w in config["watch"]] + [ROOT / "docs"]
    for page in pages():
        for target, _ in includes(page.read_text(encoding="utf-8")):
            path = (ROOT / target).resolve()
            assert path.exists(), f"{page.name} includes {target}, which does not exist"
            assert any(path.is_relative_to(w.resolve()) for w in watched), (
                f"{target} is not watched"
            )
