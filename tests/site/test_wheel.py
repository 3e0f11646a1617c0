"""The wheel the site serves, installed as its pages say, runs a snippet, a page's example
and a page's notebook; and a reader who installed an earlier wheel gets this one by running
the line again.

The wheel is built by the site's own hook (hooks/published_wheel.py) and installed by
running the install lines the pages show, word for word, in a shell, into a fresh virtual
environment outside the repository: no editable install, no clone on the path. First an
earlier package's wheel goes in (this package with one line more), as the site served it,
then this one, by the line as the site shows it now: the reader must get the new code, and
its version, which names the package's files, must be the wheel's. A snippet copied out of
the repository must then print its transcript, a page's first example what the page says,
and the page's notebook (hooks/notebooks.py), run by Jupyter in that environment, every
output its page expects.
"""

from __future__ import annotations

import ast
import doctest
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest
from pages import CODE_BLOCKS, OPTIONFLAGS, PageDocument

from conftest import ROOT

sys.path.insert(0, str(ROOT / "hooks"))
from notebook_run import differences, page_notebook
from published_wheel import BUILD_INPUTS, TORCH, VENV, build_wheel, install_lines
from test_snippets import SNIPPETS, check_prints_its_transcript, reader_env

from llmserve_ref import RELEASE, package_hash

SNIPPET = SNIPPETS / "tokens-and-the-generation-loop" / "generate.py"
PAGE = ROOT / "docs" / "stage-1" / "tokens-and-the-generation-loop.md"

# Runs a page's blocks in order, in one namespace as the page tests do, up to its first
# pycon block, which it checks as a doctest; blocks come as JSON [[language, source], ...].
RUN_BLOCKS = """
import doctest, json, sys
import llmserve_ref
print(llmserve_ref.__file__)
namespace = {"__name__": "__main__"}
for language, source in json.load(sys.stdin):
    if language == "python":
        exec(compile(source, "<page block>", "exec"), namespace)
        continue
    test = doctest.DocTestParser().get_doctest(source, namespace, "page", None, 0)
    runner = doctest.DocTestRunner(optionflags=int(sys.argv[1]))
    runner.run(test)
    print(f"{runner.tries} examples, {runner.failures} failed")
    sys.exit(runner.failures)
"""


def test_the_pages_pin_the_torch_the_sessions_install():
    """The nox sessions run the pages with noxfile.TORCH: a reader must get the same torch."""
    tree = ast.parse((ROOT / "noxfile.py").read_text(encoding="utf-8"))
    pins = [
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign)
        and [getattr(target, "id", None) for target in node.targets] == ["TORCH"]
    ]
    assert pins == [TORCH]


def outside_env() -> dict[str, str]:
    """A reader's environment: the suite's (reader_env), without a PYTHONPATH into a clone."""
    env = reader_env()
    env.pop("PYTHONPATH", None)
    return env


@dataclass
class Installed:
    python: Path  # the virtual environment's interpreter
    outside: Path  # a working directory outside the repository
    wheel: Path
    earlier: Path  # the wheel installed before it
    source: str  # the version of the source tree the wheel was built from, computed here


# What the earlier package has that this one does not: one line, in its __init__.py.
EARLIER = "EARLIER_RELEASE = True\n"


def earlier_tree(where: Path) -> Path:
    """A copy of what the wheel is built from, with one line more in the package."""
    where.mkdir()
    for name in BUILD_INPUTS:
        shutil.copy2(ROOT / name, where / name)
    package = where / "src" / "llmserve_ref"
    shutil.copytree(
        ROOT / "src" / "llmserve_ref", package, ignore=shutil.ignore_patterns("__pycache__")
    )
    with (package / "__init__.py").open("a", encoding="utf-8") as init:
        init.write(EARLIER)
    return where


def run_install_lines(wheel: Path, home: Path) -> None:
    """The pages' install lines for `wheel`, word for word, in a shell in `home`."""
    script = " && ".join(line.removeprefix("$ ") for line in install_lines(wheel.as_uri()))
    result = subprocess.run(
        ["bash", "-c", script],
        cwd=home,
        env=outside_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, f"{script}\n{result.stdout[-2000:]}{result.stderr[-4000:]}"


# What the reader's environment has: the package's version as it says, its metadata's, and
# whether the earlier package's line is there.
WHICH = """
import importlib.metadata, llmserve_ref
print(llmserve_ref.__version__, importlib.metadata.version("llmserve-ref"),
      hasattr(llmserve_ref, "EARLIER_RELEASE"))
"""


def which(python: Path, cwd: Path) -> list[str]:
    found = subprocess.run(
        [python, "-c", WHICH], cwd=cwd, env=outside_env(), capture_output=True, text=True
    )
    assert found.returncode == 0, found.stderr
    return found.stdout.split()


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Installed:
    """A returning reader: an earlier wheel, installed by the pages' own lines into a new
    environment outside the repo, then this wheel by the lines as the pages show them now
    (torch and the extras are there already: the second install is the package alone)."""
    home = tmp_path_factory.mktemp("reader")
    assert not home.resolve().is_relative_to(ROOT)
    earlier = build_wheel(home / "earlier-dist", root=earlier_tree(home / "earlier"))
    source = f"{RELEASE}+g{package_hash(ROOT / 'src' / 'llmserve_ref')[:12]}"
    wheel = build_wheel(home / "dist")
    assert package_hash(ROOT / "src" / "llmserve_ref").startswith(source[-12:]), "edited meanwhile"
    assert earlier.name != wheel.name  # its version, and with it its URL, names its files
    run_install_lines(earlier, home)
    python = home / VENV / "bin" / "python"
    assert which(python, home)[2] == "True"  # the earlier package is what a reader has
    run_install_lines(wheel, home)
    return Installed(python, home, wheel, earlier, source)


@pytest.mark.wheel
def test_the_line_again_replaces_an_earlier_wheel_and_the_version_names_the_files(installed):
    def version_of(wheel: Path) -> str:
        return wheel.name.split("-")[1]

    version, metadata, earlier = which(installed.python, installed.outside)
    assert earlier == "False"  # the new code, not the earlier package's
    # The version computed from the installed files is the one the build wrote into the
    # wheel's name and metadata, and the source tree's it was built from.
    assert version == metadata == version_of(installed.wheel) == installed.source
    assert version_of(installed.earlier) != installed.source
    command = installed.python.parent / "llmserve-ref"
    printed = subprocess.run(
        [command, "--version"], env=outside_env(), capture_output=True, text=True, check=True
    )
    assert printed.stdout == f"llmserve-ref {version}\n"


@pytest.mark.wheel
def test_the_package_comes_from_the_wheel(installed):
    result = subprocess.run(
        [installed.python, "-c", "import llmserve_ref; print(llmserve_ref.__file__)"],
        cwd=installed.outside,
        env=outside_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    module = Path(result.stdout.strip())
    assert "site-packages" in module.parts and module.is_relative_to(installed.outside / VENV)
    assert not module.is_relative_to(ROOT)


@pytest.mark.wheel
def test_a_copied_snippet_prints_its_transcript(installed):
    copy = installed.outside / "snippet"
    shutil.copytree(SNIPPET.parent, copy)
    check_prints_its_transcript(copy / SNIPPET.name, python=str(installed.python))


@pytest.mark.wheel
def test_a_pages_first_example_prints_what_the_page_says(installed):
    blocks = []
    for region in CODE_BLOCKS.lexer(PageDocument.parse(str(PAGE))):
        blocks.append([region.lexemes["language"], region.lexemes["source"]])
        if region.lexemes["language"] == "pycon":
            break
    assert blocks[-1][0] == "pycon", f"{PAGE.name} has no pycon block"
    result = subprocess.run(
        [installed.python, "-c", RUN_BLOCKS, str(OPTIONFLAGS)],
        input=json.dumps(blocks),
        cwd=installed.outside,
        env=outside_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    module, *_, summary = result.stdout.splitlines()
    assert Path(module).is_relative_to(installed.outside / VENV)
    examples = doctest.DocTestParser().get_examples(blocks[-1][1])
    assert summary == f"{len(examples)} examples, 0 failed" and examples


# Runs a notebook top to bottom in a fresh kernel, as Jupyter's "Run all" does, and saves it.
RUN_NOTEBOOK = """
import sys
import nbformat
from nbclient import NotebookClient

notebook = nbformat.read(sys.argv[1], as_version=4)
client = NotebookClient(notebook, timeout=600, kernel_name="python3",
                        resources={"metadata": {"path": sys.argv[2]}})
client.execute()
nbformat.write(notebook, sys.argv[3])
"""


@pytest.mark.wheel
def test_a_pages_notebook_runs_from_the_wheel_in_jupyter(installed):
    """A reader without a clone: the page's notebook as the site serves it, its `%pip
    install` cell included, run by Jupyter's own kernel and client (ipykernel and nbclient,
    what `pip install jupyterlab` brings to run a notebook) in the wheel's environment,
    outside the repository; every output as its page expects."""
    pip = [installed.python, "-m", "pip", "install", "--quiet", "ipykernel", "nbclient"]
    result = subprocess.run(pip, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    work = installed.outside / "notebook"
    work.mkdir()
    data = page_notebook(PAGE, wheel_url=installed.wheel.as_uri())
    where = "import llmserve_ref, sys\nprint(llmserve_ref.__file__)\nprint(sys.executable)"
    data["cells"].append(
        {"cell_type": "code", "id": "where", "execution_count": None, "metadata": {},
         "outputs": [], "source": where}
    )  # fmt: skip
    (work / f"{PAGE.stem}.ipynb").write_text(json.dumps(data), encoding="utf-8")
    result = subprocess.run(
        [installed.python, "-c", RUN_NOTEBOOK, f"{PAGE.stem}.ipynb", str(work), "ran.ipynb"],
        cwd=work,
        env=outside_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    executed = nbformat.read(work / "ran.ipynb", as_version=4)
    assert differences(PAGE, executed) == []
    module, python = executed.cells[-1].outputs[0]["text"].split()
    assert Path(module).is_relative_to(installed.outside / VENV)
    assert not Path(module).is_relative_to(ROOT)
    assert Path(python).parent == installed.python.parent
