"""Mutation testing of the named components: `nox -s mutation`.

    python tests/mutation/score.py WORKDIR [--module NAME ...] [--record]

Each module of MODULES is mutated by mutmut (pinned in noxfile.py) and run against its OWN
tests only (its test files and its doctests), so that its score says what those tests guard,
not what the whole suite happens to catch. Per module, in a fresh folder under WORKDIR that
holds a copy of what the tests import (never a file of this tree is written), mutmut writes
every mutant of the module (an operator flipped, a constant changed, an argument replaced by
None, ...), runs the tests that reach the mutated function once per mutant, and calls the
mutant killed when a test fails. Printed per module: mutants made, killed, survived, timed
out and not reached by any test, the score (killed / made), the survivors' lines (file:line,
the line and its mutated form), and the functions mutmut does not mutate: it leaves every
decorated function alone (only @staticmethod and @classmethod are mutated), so the
@triton.jit kernels, @property and @torch.no_grad() functions keep their code in every
mutant. Exits 1 when a module scores below THRESHOLD. `--record` writes RESULTS, which the
site's "How we test" page shows (hooks/mutation_scores.py); with `--module`, it replaces those
modules' rows only.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "src/llmserve_ref"
RESULTS = ROOT / "recordings" / "mutation.json"
THRESHOLD = 0.9
# Each module and its own tests (its doctests run too: the module itself is collected).
MODULES: dict[str, list[str]] = {
    "engine/block_manager.py": [
        "tests/engine/test_block_manager.py",
        "tests/engine/test_block_invariants.py",
    ],
    "engine/scheduler.py": [
        "tests/engine/test_scheduler.py",
        "tests/engine/test_scheduler_config.py",
    ],
    "kernels/flash_attention.py": ["tests/kernels/test_flash_attention.py"],
    "kernels/paged_attention.py": ["tests/kernels/test_paged_attention.py"],
    "kernels/triton_attention.py": ["tests/kernels/test_triton_attention.py"],
    "kernels/triton_paged_attention.py": ["tests/kernels/test_triton_paged_attention.py"],
    "engine/speculative.py": ["tests/engine/test_speculative.py"],
    "engine/engine_core.py": ["tests/engine/test_engine_core.py"],
    "engine/model_runner.py": ["tests/engine/test_model_runner.py"],
    "model/sampling.py": ["tests/model/test_sampling.py"],
}
# What the tests import besides the package and their own files: the conftests and the
# helpers beside them (tests/pages.py collects the doctests and needs hooks/).
SUPPORT = ["conftest.py", "hooks", *(f"tests/{p.name}" for p in (ROOT / "tests").glob("*.py"))]


@dataclass
class Survivor:
    line: int
    code: str
    mutated: str

    def __str__(self) -> str:
        return f"{self.line}: {self.code}  ->  {self.mutated}"


@dataclass
class Score:
    module: str
    tests: list[str]
    made: int = 0
    killed: int = 0
    survived: int = 0
    timed_out: int = 0
    crashed: int = 0  # of the killed: the mutant crashed the interpreter, failing the run
    no_tests: int = 0
    seconds: float = 0.0
    not_mutated: list[str] = field(default_factory=list)
    survivors: list[Survivor] = field(default_factory=list)

    @property
    def score(self) -> float:
        return self.killed / self.made if self.made else 0.0


def workspace(folder: Path, module: str, tests: list[str]) -> None:
    """A folder mutmut runs in: the package and what the tests need, linked; its config."""
    if folder.exists():
        shutil.rmtree(folder)
    # the files beside its tests too: a test may import a helper from a sibling test file
    beside = sorted(
        {f"{Path(t).parent}/{p.name}" for t in tests for p in (ROOT / t).parent.glob("*.py")}
    )
    for name in ["src", *SUPPORT, *beside]:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).symlink_to(ROOT / name)
    path = f"{PACKAGE}/{module}"
    config = {
        "source_paths": ["src"],
        "only_mutate": [path],
        "pytest_add_cli_args_test_selection": [*tests, path],
        "also_copy": ["conftest.py", "hooks"],
    }
    lines = [f"{key} = {json.dumps(value)}" for key, value in config.items()]
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    (folder / "pyproject.toml").write_text(
        f"{pyproject}\n[tool.mutmut]\n" + "\n".join(lines) + "\n"
    )


def skipped_functions(source: str) -> list[str]:
    """The functions mutmut leaves unmutated: those with a decorator other than a lone
    @staticmethod or @classmethod (mutmut's rule), as `name (@decorator)`."""
    tree = ast.parse(source)
    found = []
    for node in tree.body:
        members = node.body if isinstance(node, ast.ClassDef) else [node]
        for function in members:
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            decorators = [ast.unparse(d) for d in function.decorator_list]
            if decorators and decorators not in (["staticmethod"], ["classmethod"]):
                owner = f"{node.name}." if isinstance(node, ast.ClassDef) else ""
                found.append(f"{owner}{function.name} (@{', @'.join(decorators)})")
    return found


def function_lines(source: str, function: str, owner: str | None) -> tuple[int, int]:
    """First line (its first decorator) and last line of `function` in `source`, a method
    of class `owner` if given."""
    tree = ast.parse(source)
    scope = tree.body
    if owner is not None:
        scope = next(n.body for n in tree.body if isinstance(n, ast.ClassDef) and n.name == owner)
    node = next(
        n
        for n in scope
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == function
    )
    return min([node.lineno] + [d.lineno for d in node.decorator_list]), node.end_lineno or 0


def survivor(diff: str, source: str, function: str, owner: str | None) -> Survivor:
    """A survivor's line in the source file, from mutmut's diff of its function (a hunk of
    the function's lines, counted from its top, with the mutated lines marked -/+)."""
    lines = diff.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("@@"))
    old_start = int(lines[start].split()[1].lstrip("-").split(",")[0])
    body = [line for line in lines[start + 1 :] if not line.startswith("@@")]
    old = [line for line in body if not line.startswith("+")]  # the hunk's original lines
    first = next(i for i, line in enumerate(old) if line.startswith("-"))
    text = [line.strip() for line in source.splitlines()]
    top, bottom = function_lines(source, function, owner)
    low = max(top - 10, 1)  # comments above the function are part of its text
    matches = [
        p
        for p in range(low, bottom + 2 - len(old))
        if text[p - 1 : p - 1 + len(old)] == [line[1:].strip() for line in old]
    ]
    # the match nearest to where the hunk says it starts (the function's text begins at `top`,
    # or at the comments above it)
    at = min(matches, key=lambda p: abs(p - (top + old_start - 1)))
    added = [line[1:].strip() for line in body if line.startswith("+")]
    mutated = " / ".join(added) if added else "(left out)"
    return Survivor(at + first, text[at + first - 1], mutated)


def measure(folder: Path, module: str, tests: list[str]) -> Score:
    """Run mutmut on `module` against `tests` in `folder`; read back what it found."""
    workspace(folder, module, tests)
    started = time.perf_counter()
    mutmut = Path(sys.executable).parent / "mutmut"
    # mutmut forks each mutant's test run from a process that has run torch already; a fork
    # does not take OpenMP's thread pool with it, and a child that calls a parallel op then
    # waits for threads that are not there (tests hung until the time limit). One thread
    # keeps torch out of OpenMP, as PyTorch's own DataLoader does in the workers it forks.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    with open(folder / "mutmut.log", "w") as log:
        command = [str(mutmut), "run", "--max-children", "1"]
        done = subprocess.run(command, cwd=folder, env=env, stdout=log, stderr=log)
    score = Score(module, tests, seconds=time.perf_counter() - started)
    if done.returncode != 0:
        tail = (folder / "mutmut.log").read_text(errors="replace")[-3000:]
        sys.exit(f"mutmut failed on {module} (exit {done.returncode}):\n{tail}")
    return read_results(folder, score)


def read_results(folder: Path, score: Score) -> Score:
    """The counts and survivors of a finished run, read with mutmut's own readers."""
    from mutmut.configuration import reset_config
    from mutmut.mutation.data import SourceFileMutationData
    from mutmut.mutation.diff_apply import get_diff_for_mutant
    from mutmut.stats import status_by_exit_code
    from mutmut.utils.format_utils import orig_function_and_class_names_from_key

    path = f"{PACKAGE}/{score.module}"
    source = (ROOT / path).read_text(encoding="utf-8")
    score.not_mutated = skipped_functions(source)
    here = Path.cwd()
    os.chdir(folder)  # mutmut reads its config and mutants/ from the current folder
    reset_config()
    try:
        data = SourceFileMutationData(path=path)
        data.load()
        for key, code in sorted(data.exit_code_by_key.items()):
            status = status_by_exit_code[code]
            score.made += 1
            if code == -signal.SIGKILL:  # past its CPU time, SIGXCPU ignored: a time-out
                status = "timeout"
            elif code is not None and code < 0 and status != "timeout":  # SIGSEGV, SIGABRT:
                status, score.crashed = "killed", score.crashed + 1  # the run failed: caught
            if status == "killed":
                score.killed += 1
            elif status == "timeout":
                score.timed_out += 1
            elif status == "no tests":
                score.no_tests += 1
            elif status == "survived":
                score.survived += 1
            else:
                sys.exit(f"{key}: mutmut's verdict is {status!r}, which this script cannot count")
            if status in ("survived", "no tests"):
                function, owner = orig_function_and_class_names_from_key(key)
                diff = get_diff_for_mutant(key, path=path)
                score.survivors.append(survivor(diff, source, function, owner))
    finally:
        os.chdir(here)
        reset_config()
    score.survivors.sort(key=lambda s: s.line)
    return score


def report(score: Score) -> str:
    path = f"{PACKAGE}/{score.module}"
    lines = [
        f"{path}: {score.made} mutants, {score.killed} killed, {score.survived} survived, "
        f"{score.timed_out} timed out, {score.no_tests} reached by no test "
        f"({score.crashed} of the killed crashed the test process): "
        f"{score.score:.1%} killed ({score.seconds:.0f} s; tests: {', '.join(score.tests)})"
    ]
    lines += [f"  survivor {path}:{s}" for s in score.survivors]
    if score.not_mutated:
        lines.append(
            f"  not mutated (mutmut skips decorated functions): {'; '.join(score.not_mutated)}"
        )
    return "\n".join(lines)


def table(scores: list[Score]) -> str:
    """The summary, a row per module; `survived` counts the mutants no test reached too."""
    rows = [f"{'module':36} {'made':>5} {'killed':>6} {'survived':>8} {'timeout':>7} {'score':>6}"]
    for s in scores:
        rows.append(
            f"{s.module:36} {s.made:5} {s.killed:6} {s.survived + s.no_tests:8} "
            f"{s.timed_out:7} {s.score:6.1%}"
        )
    return "\n".join(rows)


def record(scores: list[Score]) -> None:
    """Write RESULTS: these modules' rows, and the other modules' rows already there (a
    module measured again replaces its row); the time is the sum of the modules' times."""
    from importlib.metadata import version

    sys.path.insert(0, str(ROOT / "hooks"))
    from recorded_outputs import machine  # the label every recorded output carries

    kept = json.loads(RESULTS.read_text(encoding="utf-8"))["modules"] if RESULTS.exists() else []
    rows = {row["module"]: row for row in kept if row["module"] in MODULES}
    for s in scores:
        rows[s.module] = {**asdict(s), "seconds": round(s.seconds)}
    results = {
        "tool": f"mutmut {version('mutmut')}",
        "threshold": THRESHOLD,
        "date": datetime.date.today().isoformat(),
        "machine": machine(),
        "seconds": sum(row["seconds"] for row in rows.values()),
        "modules": [rows[m] for m in MODULES if m in rows],
    }
    RESULTS.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    print(f"recorded in {RESULTS.relative_to(ROOT)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workdir", type=Path, help="a folder for mutmut's copies (emptied)")
    parser.add_argument("--module", action="append", choices=MODULES, help="only these")
    parser.add_argument(
        "--record", action="store_true", help=f"write (or, with --module, update) {RESULTS.name}"
    )
    args = parser.parse_args()
    started = time.perf_counter()
    scores = []
    for module in args.module or MODULES:
        folder = args.workdir / module.replace("/", "-").removesuffix(".py")
        print(f"mutating {PACKAGE}/{module} ...", flush=True)
        scores.append(measure(folder, module, MODULES[module]))
        print(report(scores[-1]), flush=True)
    seconds = time.perf_counter() - started
    print(f"\n{table(scores)}\n\nmutation session: {seconds:.0f} s for {len(scores)} modules")
    low = [s.module for s in scores if s.score < THRESHOLD]
    if args.record:
        record(scores)
    if low:
        sys.exit(f"below {THRESHOLD:.0%} killed by their own tests: {', '.join(low)}")


if __name__ == "__main__":
    main()
