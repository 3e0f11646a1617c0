"""MkDocs hook: the site serves the package's wheel, and shows the line that installs it.

A reader of the hosted site should run its code without cloning the repository. So the
build makes the package's wheel (tokenizer and tiny models included) and publishes it at
`downloads/<wheel>`, next to the pages, and every page with runnable code (a ```python or
```pycon block), and the home page where it says `<!-- install -->`, shows a box with
the two lines that install it into a virtual environment. The wheel's URL comes from
`site_url`, which the deployment sets; its name, and with it the version, from the build
itself: `llmserve_ref.__version__`, the release and a hash of the package's files, which
pyproject.toml reads. A changed package is a new version and a new URL, so a returning
reader who runs the line again gets the new code (pip keeps an installed package whose
version is the one asked for, whatever the URL).

The wheel is built from a copy of the package in a temporary directory: setuptools
writes `build/` and `*.egg-info` where it builds, and neither may land in the source
tree (`mkdocs serve` watches it, and would rebuild for ever). `install_commands()` is the
one home of the lines: the box shows them and tests/site/test_wheel.py runs them.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import tempfile
import urllib.parse
from pathlib import Path

from mkdocs.structure.files import File
from recorded_outputs import FENCE

ROOT = Path(__file__).resolve().parent.parent
# What setuptools reads to build the wheel: the project, its readme and license, the code.
BUILD_INPUTS = ("pyproject.toml", "README.md", "LICENSE")
DOWNLOADS = "downloads"
INSTALL_MARKER = "<!-- install -->"
# The torch the nox sessions install (noxfile.TORCH), by Python version: PyPI has torch
# 2.13.0 for Python 3.10 to 3.14, and Python 3.15's first torch is 2.15.0 (for 3.11 to 3.15).
# A looser spec may pull a multi-GB CUDA build, or a release the pages were never run with.
TORCH = (
    'torch==2.13.0; python_version < "3.15"',
    'torch==2.15.0; python_version >= "3.15"',
)
# What the pages' code imports beyond the core: figures (plot), the server and the
# official OpenAI client (serving), and hypothesis (pages). Triton comes with PyPI's Linux
# torch, and the pages whose kernels need it say so where it is missing.
EXTRAS = "pages,plot,serving"
VENV = "llmserve-env"


def build_wheel(out_dir: Path, root: Path = ROOT) -> Path:
    """Build the package's wheel into `out_dir`, offline, and return its path.

    Runs setuptools' PEP 517 hook in a fresh interpreter (it builds in its working
    directory), on a copy of the sources under `root` (this repository; a test passes
    another tree), with the setuptools of this environment.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="llmserve-wheel-") as tmp:
        work = Path(tmp)
        for name in BUILD_INPUTS:
            shutil.copy2(root / name, work / name)
        shutil.copytree(
            root / "src" / "llmserve_ref",
            work / "src" / "llmserve_ref",
            ignore=shutil.ignore_patterns("__pycache__"),
        )
        hook = f"import setuptools.build_meta as b; print(b.build_wheel({str(out_dir)!r}))"
        result = subprocess.run(
            [sys.executable, "-c", hook], cwd=work, capture_output=True, text=True
        )
    if result.returncode != 0:
        raise RuntimeError(
            f"building the package's wheel failed (it needs setuptools>=69 in the environment "
            f"that runs mkdocs: `python -m pip install 'setuptools>=69'`):\n"
            f"{result.stderr[-3000:]}"
        )
    return out_dir / result.stdout.strip().splitlines()[-1]


def wheel_url(site_url: str, uri: str) -> str:
    """The address of the site's file `uri`, its name's `+` (the version's) written `%2B`, as
    PyTorch's index writes `+cpu`: some static hosts read a `+` in a path as a space.

    >>> wheel_url("https://x.github.io/llmserve/", "downloads/p-0.1.0+g1-py3-none-any.whl")
    'https://x.github.io/llmserve/downloads/p-0.1.0%2Bg1-py3-none-any.whl'
    """
    return site_url.rstrip("/") + "/" + urllib.parse.quote(uri)


def requirement(wheel_url: str) -> str:
    """The package with the extras the pages need, from the wheel at `wheel_url` (PEP 508)."""
    distribution = wheel_url.rsplit("/", 1)[-1].split("-", 1)[0]
    return f"{distribution}[{EXTRAS}] @ {wheel_url}"


def install_commands(wheel_url: str) -> list[list[str]]:
    """The commands, as argument lists, that make a virtual environment and install the
    wheel at `wheel_url` into it; between them the shell activates the environment."""
    return [
        ["python3", "-m", "venv", VENV],
        ["python", "-m", "pip", "install", *TORCH, requirement(wheel_url)],
    ]


def install_lines(wheel_url: str) -> list[str]:
    """`install_commands` as a reader types them."""
    make, install = (shlex.join(command) for command in install_commands(wheel_url))
    return [f"$ {make} && . {VENV}/bin/activate", f"$ {install}"]


def install_box(wheel_url: str) -> str:
    """The admonition that shows the install lines."""
    lines = "".join(f"    {line}\n" for line in install_lines(wheel_url))
    return (
        '!!! example "Run this code on your machine"\n\n'
        "    No clone needed: this site serves the package, tiny models included.\n\n"
        f"    ```console\n{lines}    ```\n\n"
        "    On Linux without an NVIDIA GPU, add `--extra-index-url "
        "https://download.pytorch.org/whl/cpu` for torch's small CPU build. To upgrade, run "
        "the `pip` line again as this site shows it then: the wheel's name carries the "
        "package's version, which changes with the package, so pip replaces the one you "
        "have.\n"
    )


# --- MkDocs events ------------------------------------------------------------------

_state: dict = {}


def on_files(files, config):
    with tempfile.TemporaryDirectory(prefix="llmserve-dist-") as tmp:
        wheel = build_wheel(Path(tmp))
        uri = f"{DOWNLOADS}/{wheel.name}"
        files.append(File.generated(config, uri, content=wheel.read_bytes()))
    _state["url"] = wheel_url(config.site_url, uri)
    return files


def on_page_markdown(markdown, page, config, files):
    box = install_box(_state["url"])
    if INSTALL_MARKER in markdown:
        return markdown.replace(INSTALL_MARKER, box)
    if FENCE.search(markdown):
        # The curriculum hook runs after this one: its title and Needs box go above.
        return f"{box}\n{markdown}"
    return markdown
