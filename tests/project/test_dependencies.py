"""What the package declares against what it imports: every library a module of
src/llmserve_ref imports is declared (as a dependency or in an extra), and every dependency
installed with the package alone is imported by it (pyyaml was one that was not)."""

from __future__ import annotations

import ast
import importlib.metadata as metadata
import sys

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from conftest import ROOT

PACKAGE = ROOT / "src" / "llmserve_ref"


def imported_libraries() -> dict[str, set[str]]:
    """The distributions the package's modules import (any import, at any depth), each with
    the modules that import it."""
    found: dict[str, set[str]] = {}
    distributions = metadata.packages_distributions()
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for top in {name.split(".")[0] for name in names}:
                if top in sys.stdlib_module_names or top == "llmserve_ref":
                    continue
                for distribution in distributions.get(top, [top]):
                    found.setdefault(canonicalize_name(distribution), set()).add(
                        path.relative_to(PACKAGE).as_posix()
                    )
    return found


def declared() -> tuple[set[str], set[str]]:
    """The package's dependencies: those it installs alone, and those of every extra."""
    requirements = [Requirement(r) for r in metadata.requires("llmserve-ref") or []]
    alone = {
        canonicalize_name(r.name)
        for r in requirements
        if r.marker is None or "extra" not in str(r.marker)
    }
    return alone, {canonicalize_name(r.name) for r in requirements}


def test_every_library_the_package_imports_is_declared():
    imported = imported_libraries()
    assert {"torch", "numpy", "gguf", "uvicorn"} <= imported.keys()  # the walk finds them
    _, every = declared()
    undeclared = {name: sorted(files) for name, files in imported.items() if name not in every}
    assert undeclared == {}, "imported but not in pyproject.toml's dependencies or extras"


def test_every_dependency_installed_with_the_package_alone_is_imported():
    alone, _ = declared()
    assert "torch" in alone
    unused = alone - imported_libraries().keys()
    assert unused == set(), "installed with the package but never imported by it"
