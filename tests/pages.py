"""The tested-examples pipeline: what a reader sees on a page is what the suite runs.

A page is read the way MkDocs reads it: its `--8<--` includes are resolved by
pymdownx.snippets itself, configured from mkdocs.yml, so a block that embeds a section
of `src/llmserve_ref/x.py` runs that section as the reader sees it. Then Sybil collects

- every ```python block (run as code; one namespace per page, in page order),
- every ```pycon block (run as a doctest, output compared),
- every `<!-- skip: next "reason" -->` directive (the reason must be visible on the page).

`fences()` finds Python fences independently of Sybil, so a test can prove that no
block escapes collection (Sybil ignores fences whose info line it does not recognize).
"""

from __future__ import annotations

import contextlib
import doctest
import io
import os
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from sybil import Document, Example, Region, Sybil
from sybil.evaluators.doctest import DocTestEvaluator
from sybil.evaluators.doctest import OutputChecker as SybilOutputChecker
from sybil.evaluators.python import PythonEvaluator
from sybil.parsers.abstract.doctest import DocTestStringParser
from sybil.parsers.markdown import SkipParser
from sybil.parsers.markdown.lexers import RawFencedCodeBlockLexer
from sybil.parsers.rest import DocTestParser

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "hooks"))
from package_values import substitute
from page_blocks import SKIP, modules, run_as_module
from page_blocks import transcript as prompts_and_output
from recorded_outputs import FENCE, REFRESH, Run, is_a_page, key_of, load, package_hash, save
from snippets_resolver import mkdocs_config, resolve_includes  # noqa: F401 (re-exported)

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
OPTIONFLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE

# The info line of a block Sybil runs: the language, then optional attributes (title="...").
INFO = re.compile(r"(?P<language>python|pycon)(?:[ \t]+[^\n]*)?$\n", re.MULTILINE)
# Any fence a reader would read as Python, whatever Sybil makes of it.
PYTHON_FENCE = re.compile(
    r"^[ \t]*(?:>[ \t]*)*(`{3,}|~{3,})[ \t]*\{?\.?(?:python3?|py3?|pycon|ipython3?)\b",
    re.MULTILINE | re.IGNORECASE,
)
# An include line as pymdownx.snippets reads it: `--8<-- "path"` or `--8<-- "path:section"`,
# alone on its line (escaped as `;--8<--`, or inside other text, it is shown, not included).
INCLUDE = re.compile(r"""^[ \t]*-+8<-+[ \t]+(?P<q>["'])(?P<target>[^\n]+?)(?P=q)$""", re.MULTILINE)


class PageDocument(Document):
    """A Markdown page, parsed after its includes are resolved.

    `modules` maps the index of each block that includes a whole script with a command line
    to the module it runs as (hooks/page_blocks.py), as the page's notebook runs it.
    """

    modules: dict[int, str]

    @classmethod
    def parse(cls, path: str, *parsers, encoding: str = "utf-8") -> Document:
        # As the build does: the package's values first (hooks/package_values.py), then includes.
        raw = substitute(Path(path).read_text(encoding=encoding))
        text = resolve_includes(raw)
        document = cls(text, path)
        document.modules = modules(raw, text)
        for parser in parsers:
            for region in parser(document):
                document.add(region)
        return document


class RecordingChecker(SybilOutputChecker):
    """Sybil's output checker, keeping what the last example really printed."""

    got = ""

    def check_output(self, want: str, got: str, optionflags: int) -> bool:
        self.got = got
        return super().check_output(want, got, optionflags)


class Tee(io.TextIOBase):
    """Writes to the stream pytest captures and to a buffer of our own."""

    def __init__(self, *streams: TextIO) -> None:
        self.streams = streams

    def write(self, text: str) -> int:
        for stream in self.streams:
            stream.write(text)
        return len(text)


class Recorder:
    """What each block printed in this run, checked against (or written to) recordings/.

    Check mode (the default): on the CPU, where CI runs, a block that prints must have a
    recording whose key is the block's current one; CUDA and MPS runs may add their own.
    Record mode (``--record-outputs``): what ran is written to recordings/ when the
    session ends.
    """

    def __init__(self) -> None:
        self.record = False
        self.package = ""
        self.device = os.environ.get("LLMSERVE_DEVICE") or "cpu"
        # page -> block index -> (what to show of each run piece, whether each printed)
        self.printed: dict[Path, dict[int, tuple[list[str], list[bool]]]] = {}
        self.sources: dict[Path, dict[int, str]] = {}  # page -> block index -> its source
        self.stored: dict[Path, dict[int, dict[str, Run]]] = {}

    def key(self, source: str) -> str:
        if not self.package:
            self.package = package_hash()
        return key_of(source, self.package)

    def add(self, page: str, index: int, source: str, text: str, printed: bool) -> None:
        """One block, or one example of a pycon block, ran: `text` is what to show of it,
        `printed` whether it printed anything (a pycon example's text has its source too)."""
        path = Path(page)
        if not is_a_page(path):
            return
        key = self.key(source)
        self.sources.setdefault(path, {})[index] = source
        pieces, prints = self.printed.setdefault(path, {}).setdefault(index, ([], []))
        pieces.append(text)
        prints.append(printed)
        if self.record or not printed or self.device != "cpu":
            return  # a GPU's or a Mac's recordings are optional: the build needs none
        run = self.stored.setdefault(path, load(path)).get(index, {}).get(self.device)
        if run is None or run.key != key:
            raise AssertionError(
                f"{path.name}: block {index} prints, and has no current recording on "
                f"{self.device} (it or the package changed since it was recorded): run "
                f"`{self.refresh()}` and commit recordings/"
            )

    def refresh(self) -> str:
        """The one command that records this session's blocks again."""
        if os.environ.get("LLMSERVE_ENGINES") == "1":
            return "nox -s engines -- --record-outputs"
        return REFRESH.format(device=self.device)

    def save(self) -> None:
        """Write what ran on this device; blocks that ran and printed nothing lose theirs,
        and so do recordings of blocks the page no longer has (it has fewer blocks now)."""
        for path, blocks in self.printed.items():
            stored = load(path)
            page = resolve_includes(substitute(path.read_text(encoding="utf-8")))
            for gone in set(stored) - set(range(len(FENCE.findall(page)))):
                del stored[gone]
            for index, (pieces, prints) in blocks.items():
                runs = stored.setdefault(index, {})
                if any(prints):
                    runs[self.device] = Run.now(
                        self.key(self.sources[path][index]), "".join(pieces)
                    )
                else:
                    runs.pop(self.device, None)
            save(path, stored)


RECORDER = Recorder()


def transcript(example: doctest.Example, got: str) -> str:
    """One pycon example as it really ran: its source, then what it printed."""
    return prompts_and_output(example.source, got, raised=example.exc_msg is not None)


@dataclass
class CodeBlocks:
    """Runs ```python blocks as code and ```pycon blocks as doctests, and records them."""

    recorder: Recorder = field(default_factory=lambda: RECORDER)

    def __post_init__(self) -> None:
        self.lexer = RawFencedCodeBlockLexer(info_pattern=INFO)
        self.python = PythonEvaluator()
        self.checker = RecordingChecker()
        self.doctest = DocTestEvaluator(OPTIONFLAGS)
        self.doctest.runner._checker = self.checker  # the runner's checker, recording
        self.doctests = DocTestStringParser(self.doctest)

    def __call__(self, document: Document) -> Iterable[Region]:
        for index, region in enumerate(self.lexer(document)):
            source = region.lexemes["source"]
            if region.lexemes["language"] == "pycon":
                for example in self.doctests(source, document.path):
                    example.adjust(region, source)
                    example.evaluator = self._pycon(index, source)
                    yield example
            else:
                region.parsed = source
                module = getattr(document, "modules", {}).get(index)
                region.evaluator = self._python(index, source, module)
                yield region

    def _python(self, index: int, source: str, module: str | None = None):
        def evaluate(example: Example) -> None:
            printed = io.StringIO()
            with contextlib.redirect_stdout(Tee(sys.stdout, printed)):
                if module is None:
                    self.python(example)
                else:  # a script with a command line runs as a module, as in the notebook
                    run_as_module(source, module, example.namespace, example.path)
            output = printed.getvalue()
            self.recorder.add(example.path, index, source, output, bool(output.strip()))

        return evaluate

    def _pycon(self, index: int, source: str):
        def evaluate(example: Example) -> str | None:
            self.checker.got = ""
            failure = self.doctest(example)
            if not failure:
                got = self.checker.got
                text = transcript(example.parsed, got)
                self.recorder.add(example.path, index, source, text, bool(got.strip()))
            return failure

        return evaluate

    def blocks(self, document: Document) -> list[int]:
        """Start offsets of the fences this parser collects (one per block)."""
        return [region.start for region in self.lexer(document)]


CODE_BLOCKS = CodeBlocks()


def _page_setup(namespace: dict) -> None:
    # A page runs as a notebook's cells do, in `__main__`; a script with a command line
    # runs as a module (CodeBlocks), so its `if __name__ == "__main__":` part stays out.
    namespace["__name__"] = "__main__"


def page_sybil() -> Sybil:
    return Sybil(
        parsers=[CODE_BLOCKS, SkipParser()],
        patterns=["*.md"],
        path=str(DOCS),
        document_types={".md": PageDocument},
        setup=_page_setup,
        name="pages",
    )


def source_sybil() -> Sybil:
    """The doctests in the package's docstrings."""
    return Sybil(
        parsers=[DocTestParser(optionflags=OPTIONFLAGS)],
        patterns=["*.py"],
        path=str(ROOT / "src" / "llmserve_ref"),
        name="src",
    )


def pages() -> list[Path]:
    return sorted(DOCS.glob("**/*.md"))


def includes(text: str) -> list[tuple[str, str | None]]:
    """(path, section or None) of every `--8<--` include line in a page's Markdown."""
    found = []
    for m in INCLUDE.finditer(text):
        path, _, section = m["target"].partition(":")
        found.append((path, section or None))
    return found


def fences(text: str) -> list[int]:
    """Start offsets of every Python fence a reader would see in resolved Markdown."""
    return [m.start() for m in PYTHON_FENCE.finditer(text)]


def skips(text: str) -> list[tuple[str, str]]:
    """(action, reason) of every skip directive on a page."""
    return [(m["action"], m["reason"].strip()) for m in SKIP.finditer(text)]
