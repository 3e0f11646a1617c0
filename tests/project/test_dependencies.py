"""What the package declares against what it imports: every library a module of
src/llmserve_ref imports is declared (as a dependency or in an extra), and every dependency
installed with the package alone is imported by it (pyyaml was one that was not)."""

from __future__ import annotations

import ast
import importlib.metadata as metadata
import re
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


def test_the_floors_and_pythons_the_readme_states_are_the_declared_ones():
    """README.md's sentences on versions against the package's metadata (pyproject.toml's)
    and the noxfile, which installs them: the torch floor, the Pythons the package
    requires, the Pythons vLLM's CPU build installs on."""
    noxfile = (ROOT / "noxfile.py").read_text(encoding="utf-8")
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    (torch,) = [
        r for r in map(Requirement, metadata.requires("llmserve-ref") or []) if r.name == "torch"
    ]
    (floor,) = re.findall(r'^TORCH_FLOOR = "(.+?)"', noxfile, re.M)
    assert str(torch.specifier) == ">=" + floor.removesuffix(".0")  # torch>=2.5, 2.5.0
    assert f"on torch {floor}, the oldest `pyproject.toml` admits" in readme
    assert metadata.metadata("llmserve-ref")["Requires-Python"] == ">=3.10"
    assert "`site-audit` and `gguf-floor` on Python 3.10 to" in readme
    (vllm,) = re.findall(r"^VLLM_PYTHONS = \(\((\d+), (\d+)\), \((\d+), (\d+)\)\)", noxfile, re.M)
    assert f"`engines` on Linux with Python {vllm[0]}.{vllm[1]} to {vllm[2]}.{vllm[3]}" in readme
