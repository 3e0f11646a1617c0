"""What the reader sees is what ran: recorded outputs, current, visible under every block.

The suite records what each page block prints (`--record-outputs`) and otherwise checks
that every block that prints has a recording of its current code on this device; the
build shows the recordings (hooks/recorded_outputs.py). Here: the suite and the hook find
the same blocks and keys; a stale recording fails the suite and is left out of the page;
and on the built site every block with a current recording shows it.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
import recorded_outputs
from pages import CODE_BLOCKS, DOCS, CodeBlocks, PageDocument, Recorder, pages, resolve_includes
from recorded_outputs import FENCE, current_output, dedent, key_of, load, with_outputs
from sybil import Sybil
from sybil.parsers.markdown import SkipParser


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.relative_to(DOCS).as_posix())
def test_the_hook_finds_the_blocks_and_keys_the_suite_runs(page: Path):
    document = PageDocument.parse(str(page), CODE_BLOCKS)
    suite = [r.lexemes["source"] for r in CODE_BLOCKS.lexer(document)]
    hook = [dedent(m["body"], m["indent"]) for m in FENCE.finditer(document.text)]
    assert hook == suite
    raw = page.read_text(encoding="utf-8")
    assert len(FENCE.findall(raw)) == len(suite)  # includes add no fence: order pairs them


def run(page: Path, recorder: Recorder) -> list[BaseException]:
    sybil = Sybil(
        parsers=[CodeBlocks(recorder), SkipParser()],
        path=str(page.parent),
        patterns=[page.name],
        document_types={".md": PageDocument},
    )
    failures = []
    for example in sybil.parse(page).examples():
        try:
            example.evaluate()
        except Exception as error:
            failures.append(error)
    return failures


PAGE = """\
Some prose.

```python
print("six times seven is", 6 * 7)
```

```pycon
>>> import time
>>> time.time() > 0, "..."
(True, ...)
```

```python
quiet = 1
```
"""


@pytest.fixture
def docs(tmp_path, monkeypatch):
    """A docs/ and a recordings/ of our own, so the test writes nothing in the project."""
    monkeypatch.setattr(recorded_outputs, "DOCS", tmp_path / "docs")
    monkeypatch.setattr(recorded_outputs, "RECORDINGS", tmp_path / "recordings")
    (tmp_path / "docs").mkdir()
    return tmp_path / "docs"


def test_a_block_that_prints_fails_until_recorded_and_again_when_it_changes(docs):
    page = docs / "page.md"
    page.write_text(PAGE)
    failures = run(page, Recorder())
    assert len(failures) == 2  # the print, and the pycon example with an elided value
    assert all("--record-outputs" in str(f) for f in failures)

    recorder = Recorder()
    recorder.record = True
    assert run(page, recorder) == []
    recorder.save()
    runs = load(page)
    assert sorted(runs) == [0, 1]  # the quiet block has none
    assert runs[0]["cpu"].output == "six times seven is 42\n"
    assert runs[1]["cpu"].output.startswith(">>> import time\n>>> time.time() > 0")
    assert "(True, '...')" in runs[1]["cpu"].output

    assert run(page, Recorder()) == []  # current: the check passes
    page.write_text(PAGE.replace("6 * 7", "7 * 6"))
    failures = run(page, Recorder())
    assert len(failures) == 1 and "no current recording on cpu" in str(failures[0])


def record(page: Path, text: str) -> Recorder:
    """Write `text` as `page`, run its blocks and record what they print."""
    page.write_text(text)
    recorder = Recorder()
    recorder.record = True
    run(page, recorder)
    recorder.save()
    return recorder


def test_the_page_shows_current_outputs_and_says_when_one_was_left_out(docs):
    page = docs / "page.md"
    recorder = record(page, PAGE)
    package = recorder.package
    shown = with_outputs(PAGE, PAGE, load(page), package)
    assert shown.count('!!! output "Output (cpu:') == 2
    assert "six times seven is 42" in shown
    changed = PAGE.replace("6 * 7", "7 * 6")
    stale = with_outputs(changed, changed, load(page), package)
    assert stale.count("!!! output ") == 1 and stale.count("Output left out") == 1
    assert key_of("x", package) != key_of("x", package + "changed")  # the package counts too


def test_a_pycon_block_that_shows_all_it_printed_gets_no_panel(docs):
    page = docs / "page.md"
    text = "```pycon\n>>> 6 * 7\n42\n```\n"
    recorder = record(page, text)
    assert "!!! output" not in with_outputs(text, text, load(page), recorder.package)


def test_a_figure_reads_a_blocks_current_output_and_nothing_stale(docs):
    page = docs / "page.md"
    record(page, PAGE)
    assert current_output(page, "cpu", "six times") == "six times seven is 42\n"
    assert current_output(page, "cpu", "time.time()").startswith(">>> import time")
    assert current_output(page, "cpu", "nobody printed this") is None
    assert current_output(page, "cuda", "six times") is None  # recorded on the CPU only
    page.write_text(PAGE.replace("6 * 7", "7 * 6"))
    assert current_output(page, "cpu", "six times") is None  # stale: the block changed


def panels_expected(page: Path) -> tuple[int, int]:
    """Blocks of `page` whose current recording the page must show in a panel, and
    blocks whose recording is stale, which the page must say it left out. (The suite
    fails on a stale recording of a block this session runs; the blocks that run only in
    `nox -s engines`, and other devices' recordings, may be stale here.)"""
    resolved = resolve_includes(page.read_text(encoding="utf-8"))
    shown = with_outputs(resolved, resolved, load(page), recorded_outputs.package_hash())
    return shown.count('!!! output "'), shown.count("!!! output-stale ")


@pytest.mark.slow
def test_every_current_recording_is_on_the_built_page_and_every_stale_one_is_named(built_site):
    counts = {}
    for page in pages():
        html_path = built_site.site / page.relative_to(DOCS).with_suffix("") / "index.html"
        if page.name == "index.md":
            html_path = built_site.site / "index.html"
        html = html_path.read_text(encoding="utf-8")
        found = len(re.findall(r'class="admonition output"', html))
        left_out = len(re.findall(r'class="admonition output-stale"', html))
        assert (found, left_out) == panels_expected(page), page.name
        counts[page.relative_to(DOCS).as_posix()] = found
    print("\n" + textwrap.indent("\n".join(f"{n:3} {p}" for p, n in counts.items()), "  "))
    assert sum(counts.values()) > 0
