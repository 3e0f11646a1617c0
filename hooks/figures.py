"""MkDocs hook: draw every figure at build time from the code that defines it.

A figure is a script `docs/<dir>/figures/<name>.py` that defines `figure()`, returning a
matplotlib `Figure`. The build calls it and serves the result as
`<dir>/figures/<name>.svg`, so a page shows it with `![...](figures/<name>.svg)`.
No image is committed, so none can go stale; a script that fails fails the build.
"""

from __future__ import annotations

import io
import logging
import runpy
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

from mkdocs.structure.files import File

log = logging.getLogger("mkdocs.hooks.figures")


def render(script: Path) -> str:
    """Run a figure script and return its figure as SVG text."""
    namespace = runpy.run_path(str(script), run_name="__figure__")
    if "figure" not in namespace:
        raise ValueError(f"{script} must define figure() returning a matplotlib Figure")
    fig = namespace["figure"]()
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    return buffer.getvalue()


def on_files(files, config):
    docs_dir = Path(config["docs_dir"])
    for script in sorted(docs_dir.glob("**/figures/*.py")):
        uri = script.relative_to(docs_dir).with_suffix(".svg").as_posix()
        files.append(File.generated(config, uri, content=render(script)))
        log.info("figures: drew %s", uri)
    return files
