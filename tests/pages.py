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

import doctest
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import markdown
import yaml
from sybil import Document, Region, Sybil
from sybil.evaluators.doctest import DocTestEvaluator
from sybil.evaluators.python import PythonEvaluator
from sybil.parsers.abstract.doctest import DocTestStringParser
from sybil.parsers.markdown import SkipParser
from sybil.parsers.markdown.lexers import RawFencedCodeBlockLexer
from sybil.parsers.rest import DocTestParser

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
SKIP = re.compile(r"<!--+\s*skip:\s*(?P<action>\w+)(?P<reason>[^\n]*?)\s*--+>")


class _ConfigLoader(yaml.SafeLoader):
    """Reads mkdocs.yml, keeping MkDocs' own tags (`!relative`, `!ENV`) as plain text."""


_ConfigLoader.add_multi_constructor("!", lambda loader, tag, node: f"{tag} {node.value}")


def mkdocs_config() -> dict:
    return yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=_ConfigLoader)


def _snippets_config() -> dict:
    """pymdownx.snippets options exactly as mkdocs.yml sets them, paths made absolute."""
    for extension in mkdocs_config()["markdown_extensions"]:
        if isinstance(extension, dict) and "pymdownx.snippets" in extension:
            # mkdocs.yml says `base_path: !relative $config_dir`: the repository root.
            return {**extension["pymdownx.snippets"], "base_path": [str(ROOT)]}
    raise LookupError("mkdocs.yml does not enable pymdownx.snippets")


def resolve_includes(text: str) -> str:
    """The page's Markdown after pymdownx.snippets has replaced every `--8<--` line."""
    md = markdown.Markdown(
        extensions=["pymdownx.snippets"],
        extension_configs={"pymdownx.snippets": _snippets_config()},
    )
    lines = text.split("\n")
    for preprocessor in md.preprocessors:
        if preprocessor.__class__.__name__ == "SnippetPreprocessor":
            lines = preprocessor.run(lines)
    return "\n".join(lines)


class PageDocument(Document):
    """A Markdown page, parsed after its includes are resolved."""

    @classmethod
    def parse(cls, path: str, *parsers, encoding: str = "utf-8") -> Document:
        text = resolve_includes(Path(path).read_text(encoding=encoding))
        document = cls(text, path)
        for parser in parsers:
            for region in parser(document):
                document.add(region)
        return document


@dataclass
class CodeBlocks:
    """Runs ```python blocks as code and ```pycon blocks as doctests."""

    def __post_init__(self) -> None:
        self.lexer = RawFencedCodeBlockLexer(info_pattern=INFO)
        self.python = PythonEvaluator()
        self.doctests = DocTestStringParser(DocTestEvaluator(OPTIONFLAGS))

    def __call__(self, document: Document) -> Iterable[Region]:
        for region in self.lexer(document):
            source = region.lexemes["source"]
            if region.lexemes["language"] == "pycon":
                for example in self.doctests(source, document.path):
                    example.adjust(region, source)
                    yield example
            else:
                region.parsed = source
                region.evaluator = self.python
                yield region

    def blocks(self, document: Document) -> list[int]:
        """Start offsets of the fences this parser collects (one per block)."""
        return [region.start for region in self.lexer(document)]


CODE_BLOCKS = CodeBlocks()


def _page_setup(namespace: dict) -> None:
    # Snippets guard their command line with `if __name__ == "__main__":`; on a page
    # they are shown as a module, so the guard must see another name.
    namespace["__name__"] = "__page__"


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


def fences(text: str) -> list[int]:
    """Start offsets of every Python fence a reader would see in resolved Markdown."""
    return [m.start() for m in PYTHON_FENCE.finditer(text)]


def skips(text: str) -> list[tuple[str, str]]:
    """(action, reason) of every skip directive on a page."""
    return [(m["action"], m["reason"].strip()) for m in SKIP.finditer(text)]
