"""MkDocs hook: a value from the package, written into the page's prose at build time.

A page that states a constant of the package, or a fact about another system that the
package keeps with its source (`llmserve_ref.planning.published`), names it instead of
typing it, so the sentence changes when the constant does:

    vLLM's default `gpu_memory_utilization` is
    {{ llmserve_ref.planning.published.VLLM.gpu_memory_utilization }}.

The name is a module of the package and attributes under it; after a `|`, a format spec
(`{{ llmserve_ref.x.RATIO | .0% }}` writes 0.92 as 92%). The test suite substitutes the same
way before it runs a page (tests/pages.py), so what runs is what the reader sees.

>>> substitute("{{ llmserve_ref.model.sampling.MAX_TEMPERATURE | .1f }} at most")
'2.0 at most'
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable

VALUE = re.compile(r"\{\{\s*(?P<name>llmserve_ref(?:\.\w+)+)\s*(?:\|\s*(?P<spec>[^}]*?)\s*)?\}\}")


def value_of(name: str) -> object:
    """The object a dotted name reaches: the longest importable module, then attributes."""
    parts = name.split(".")
    for split in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:split]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[split:]:
            try:
                found = getattr(found, attribute)
            except AttributeError:
                raise LookupError(f"{name}: {attribute!r} is not in the package") from None
        return found
    raise LookupError(f"{name}: no such module in the package")


def substitute(markdown: str, mark: Callable[[str], str] = str) -> str:
    """`markdown` with every ``{{ llmserve_ref.... }}`` replaced by its value, passed
    through `mark` (the prose-number test marks them: they come from the package)."""
    return VALUE.sub(lambda m: mark(format(value_of(m["name"]), m["spec"] or "")), markdown)


# MkDocs hook: first of the hooks, so that every later one sees the values.


def on_page_markdown(markdown: str, page, config, files) -> str:
    return substitute(markdown)
