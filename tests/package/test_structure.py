"""The package stays readable: modules a reader can hold in their head, one home per name.

* no module over 400 lines;
* no function over 60 lines (Triton kernels, ``@triton.jit``, excepted: a kernel is one
  program, and splitting it would hide the loop a reader has to see whole);
* no public top-level function or class defined in two modules (each module's ``main``
  aside): one home per idea;
* no method that only forwards to a function or method of the same name with the
  arguments it was given: call the one it forwards to.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "llmserve_ref"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def name(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def is_kernel(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A Triton kernel: decorated with ``triton.jit`` (or ``jit``)."""
    return any(ast.unparse(d).split(".")[-1].startswith("jit") for d in node.decorator_list)


def long_functions(tree: ast.Module) -> list[tuple[str, int]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not is_kernel(node):
            lines = node.end_lineno - node.lineno + 1
            if lines > MAX_FUNCTION_LINES:
                found.append((node.name, lines))
    return found


def forwards(method: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Its body (docstring aside) is ``return x.<same name>(<its own parameters>)``, maybe
    with attributes of ``self`` added: it adds nothing but a second name for one thing."""
    body = [
        s
        for s in method.body
        if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
    ]
    if len(body) != 1 or not isinstance(body[0], ast.Return):
        return False
    call = body[0].value
    if isinstance(call, ast.Await):
        call = call.value
    if not isinstance(call, ast.Call):
        return False
    func = call.func
    called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
    if called != method.name:
        return False
    params = [a.arg for a in method.args.args[1:]] + [a.arg for a in method.args.kwonlyargs]
    passed = [*call.args, *(k.value for k in call.keywords)]

    def plain(node: ast.expr) -> bool:
        if isinstance(node, ast.Name):
            return node.id in params
        return (  # self.<attribute>
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
        )

    return all(plain(node) for node in passed)


def forwarding_methods(tree: ast.Module) -> list[str]:
    found = []
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for member in cls.body:
            if isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef) and forwards(member):
                found.append(f"{cls.name}.{member.name}")
    return found


@pytest.mark.parametrize("path", sources(), ids=name)
def test_modules_and_functions_stay_short(path):
    lines = path.read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_MODULE_LINES, f"{name(path)} has {lines} lines: split it along a seam"
    assert long_functions(parsed(path)) == [], f"functions over {MAX_FUNCTION_LINES} lines"


@pytest.mark.parametrize("path", sources(), ids=name)
def test_no_method_only_forwards_to_its_namesake(path):
    assert forwarding_methods(parsed(path)) == []


def test_no_public_name_is_defined_in_two_modules():
    homes: dict[str, list[str]] = defaultdict(list)
    for path in sources():
        for node in parsed(path).body:
            defines = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            if defines and not node.name.startswith("_") and node.name != "main":
                homes[node.name].append(name(path))
    twice = {n: where for n, where in homes.items() if len(where) > 1}
    assert twice == {}, f"one home per name: {twice}"


def test_the_checks_catch_what_they_forbid():
    forwarding = ast.parse(
        "class Engine:\n"
        "    def has_unfinished_requests(self):\n"
        "        '''Doc.'''\n"
        "        return self.scheduler.has_unfinished_requests()\n"
        "    def blocks_for(self, n):\n"
        "        return blocks_for(n, self.block_size)\n"
        "    def decode(self, ids):\n"
        "        return self.backend.decode(list(ids))\n"  # converts: not a mere forward
    )
    assert forwarding_methods(forwarding) == [
        "Engine.has_unfinished_requests",
        "Engine.blocks_for",
    ]
    long = ast.parse("def f():\n" + "    x = 1\n" * MAX_FUNCTION_LINES)
    kernel = ast.parse("@triton.jit\ndef k():\n" + "    x = 1\n" * MAX_FUNCTION_LINES)
    assert long_functions(long) == [("f", MAX_FUNCTION_LINES + 1)]
    assert long_functions(kernel) == []
