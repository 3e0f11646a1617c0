"""The tests mirror the package: each module has a test file of its own, with tests in it.

``src/llmserve_ref/<layer>/<module>.py`` is tested by ``tests/<layer>/test_<module>.py``
(``device.py`` and ``cli.py``, at the package root, by ``tests/test_<module>.py``), so a
reader who opens a module knows where its checks are. Doctests do not count: a file of
its own holds at least one ``test_`` function. The site's tests live in ``tests/site``,
the real engines beside ours in ``tests/peers``, checks of the whole package in
``tests/package`` and of the repository in ``tests/project``.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "llmserve_ref"
TESTS = ROOT / "tests"


def expected_test_file(module: Path) -> Path:
    relative = module.relative_to(PACKAGE)
    return TESTS.joinpath(*relative.parts[:-1], f"test_{module.name}")


def named_tests(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.name.startswith("test_")
    ]


def test_every_module_has_a_test_file_with_tests_of_its_own():
    modules = sorted(p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py")
    files = [expected_test_file(m) for m in modules]
    missing = [str(f.relative_to(ROOT)) for f in files if not f.is_file()]
    empty = [str(f.relative_to(ROOT)) for f in files if f.is_file() and not named_tests(f)]
    assert (missing, empty) == ([], [])


def test_no_test_file_is_left_at_the_top_of_tests():
    """Only the tests of the package root's own modules sit directly in tests/."""
    roots = {f"test_{p.name}" for p in PACKAGE.glob("*.py") if p.name != "__init__.py"}
    flat = sorted(p.name for p in TESTS.glob("test_*.py"))
    assert set(flat) <= roots, f"move these into their folder: {sorted(set(flat) - roots)}"
