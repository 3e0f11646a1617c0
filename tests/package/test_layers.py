"""The package is layered: each module imports only its own layer and the layers below.

kernels < model < engine < planning < serving < bench, with `device` under all of them and
`cli` above all of them (DESIGN.md). Imports inside functions count too: a lazy import from a
layer above is still an upward dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "llmserve_ref"
LAYERS = ["device", "kernels", "model", "engine", "planning", "serving", "bench", "cli"]


def layer_of(module: str) -> int:
    """The rank of `llmserve_ref.<first>...` in LAYERS (the package root's __init__ is 0)."""
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 else 0


def modules() -> list[tuple[str, Path]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE.parent).with_suffix("")
        name = ".".join(relative.parts).removesuffix(".__init__")
        found.append((name, path))
    return found


def imported(path: Path) -> set[str]:
    """Every `llmserve_ref...` module `path` imports, at any depth of its code."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names if a.name.startswith("llmserve_ref")}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("llmserve_ref"):
            if node.module == "llmserve_ref":  # from llmserve_ref import model
                names |= {f"llmserve_ref.{a.name}" for a in node.names}
            else:
                names.add(node.module)
    return names


def test_the_package_root_holds_only_device_and_cli():
    flat = {p.stem for p in PACKAGE.glob("*.py")}
    assert flat == {"__init__", "device", "cli"}, "put new modules in their layer's folder"
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert folders == set(LAYERS) - {"device", "cli"}


@pytest.mark.parametrize("name, path", modules(), ids=[m for m, _ in modules()])
def test_imports_go_down_the_stack(name, path):
    if name == "llmserve_ref":
        return
    upward = sorted(m for m in imported(path) if layer_of(m) > layer_of(name))
    assert not upward, f"{name} (layer {LAYERS[layer_of(name)]}) imports from above: {upward}"


def test_the_check_sees_an_upward_import(tmp_path):
    module = tmp_path / "bad.py"
    module.write_text("def f():\n    from llmserve_ref.serving.launcher import serve\n")
    assert imported(module) == {"llmserve_ref.serving.launcher"}
    assert layer_of("llmserve_ref.serving.launcher") > layer_of("llmserve_ref.model.llama")
