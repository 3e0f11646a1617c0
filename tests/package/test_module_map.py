"""The module map, `llmserve_ref/__init__.py`'s docstring, is complete and cannot go stale.

It is the one list of the package's modules: by layer, each with what it is and the
pages that use it, so a reader finds the code behind a page. A page uses a module when
it includes a section of it (`--8<-- "src/llmserve_ref/...py:name"`) or imports from it,
on the page itself or in a file it includes (a figure's script, a snippet).
"""

from __future__ import annotations

import re
from pathlib import Path

from package_values import VALUE
from pages import DOCS, ROOT, includes, pages

import llmserve_ref

PACKAGE = ROOT / "src" / "llmserve_ref"
# An entry: "* ``engine.scheduler``: what it is ... Pages: stage-7/a, stage-8/b." (or
# "Pages: none."), continued on indented lines.
ENTRY = re.compile(r"^\* ``(?P<module>[\w.]+)``(?P<text>.*?)(?=^\S|\Z)", re.MULTILINE | re.DOTALL)
PAGES = re.compile(r"Pages: (?P<pages>[^.]*)\.\s*$")
# A layer heading: "kernels/, ...:" or "device.py, ...:", alone on its line.
HEADING = re.compile(r"^(?P<layer>\w+)(?:/|\.py),.*:$", re.MULTILINE)
IMPORT = re.compile(
    r"\bfrom\s+(?P<base>llmserve_ref(?:\.\w+)*)\s+import\s+(?P<names>\([^)]*\)|[^\n]*)"
    r"|\bimport\s+(?P<module>llmserve_ref(?:\.\w+)+)"
)


def modules() -> list[str]:
    """Every module of the package, as ``layer.name`` (``device`` and ``cli`` at the top)."""
    return sorted(
        ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        for path in PACKAGE.rglob("*.py")
        if path.name != "__init__.py"
    )


def imported(text: str) -> set[str]:
    """The package's modules that `text` imports from (``from llmserve_ref.model import corpus``
    imports the module ``model.corpus``)."""
    known, found = set(modules()), set()
    for m in IMPORT.finditer(text):
        if m["module"]:
            found.add(m["module"].removeprefix("llmserve_ref."))
            continue
        base = m["base"].removeprefix("llmserve_ref").removeprefix(".")
        for name in re.findall(r"\w+", m["names"].split("#")[0]):
            child = f"{base}.{name}" if base else name
            found.add(child if child in known else base)
    return found & known


def substituted(text: str) -> set[str]:
    """The modules whose values the page's prose is written with (hooks/package_values.py)."""
    known, found = set(modules()), set()
    for m in VALUE.finditer(text):
        parts = m["name"].removeprefix("llmserve_ref.").split(".")
        found |= {".".join(parts[:n]) for n in range(1, len(parts) + 1)} & known
    return found


def used_by() -> dict[str, set[str]]:
    """Module -> the pages (``stage-7/scheduler-simulator``) that use it."""
    users: dict[str, set[str]] = {}
    for page in pages():
        text = page.read_text(encoding="utf-8")
        used = imported(text) | substituted(text)
        for target, _ in includes(text):
            if target.startswith("src/llmserve_ref/"):
                used.add(
                    ".".join(Path(target).relative_to("src/llmserve_ref").with_suffix("").parts)
                )
            else:
                used |= imported((ROOT / target).read_text(encoding="utf-8"))
        for module in used:
            users.setdefault(module, set()).add(page.relative_to(DOCS).with_suffix("").as_posix())
    return users


def entries() -> list[tuple[str, str, set[str]]]:
    """(layer heading, module, pages named) of every entry of the map, in order."""
    doc = llmserve_ref.__doc__ or ""
    headings = [(m.start(), m["layer"]) for m in HEADING.finditer(doc)]
    found = []
    for m in ENTRY.finditer(doc):
        layer = max((h for h in headings if h[0] < m.start()), default=(0, None))[1]
        named = PAGES.search(" ".join(m["text"].split()))
        assert named, f"the map's entry for {m['module']} does not end with 'Pages: ....'"
        listed = {p.strip() for p in named["pages"].split(",")} - {"none"}
        found.append((layer, m["module"], listed))
    return found


def test_the_map_lists_every_module_once_under_its_layer():
    listed = [module for _, module, _ in entries()]
    assert sorted(listed) == modules(), (
        f"missing from the map: {sorted(set(modules()) - set(listed))}; not modules: "
        f"{sorted(set(listed) - set(modules()))}; twice: "
        f"{sorted({m for m in listed if listed.count(m) > 1})}"
    )
    misplaced = [module for layer, module, _ in entries() if module.split(".")[0] != layer]
    assert misplaced == [], f"entries under another layer's heading: {misplaced}"


def test_the_map_names_exactly_the_pages_that_use_each_module():
    users = used_by()
    wrong = {
        module: {"map says": sorted(listed), "pages using it": sorted(users.get(module, set()))}
        for _, module, listed in entries()
        if listed != users.get(module, set())
    }
    assert wrong == {}, f"update the map in src/llmserve_ref/__init__.py: {wrong}"


def test_imports_are_read_in_every_form_pages_use():
    text = (
        ">>> from llmserve_ref.planning.simulator import Pool\n"
        "from llmserve_ref.model import corpus, weights as w\n"
        "from llmserve_ref.bench.bench_metrics import (\n    SLO,\n    Stats,\n)\n"
        "import llmserve_ref.engine.scheduler\n"
    )
    assert imported(text) == {
        "planning.simulator",
        "model.corpus",
        "model.weights",
        "bench.bench_metrics",
        "engine.scheduler",
    }
