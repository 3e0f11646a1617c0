"""MkDocs hook and generator: every topic page as a Jupyter notebook, built from the page.

The page stays the one source; its notebook is made at build time and never committed. It
holds what the reader sees, in order (hooks/page_blocks.py reads the page as the suite runs
it): the prose as Markdown cells (hooks/notebook_markdown.py), each ```python block a code
cell, each `>>>` example of a ```pycon block its own cell, with the output the suite
recorded on the CPU (recordings/, hooks/recorded_outputs.py). In front go the install box's
`pip` line as `%pip install ...`, and a cell that sets what the pages need (the device, and
Triton's interpreter on a CPU, as the nox sessions do).

- A block the suite never runs (`skip: next "reason"`) is a listing in a Markdown cell.
- A block it skips on a condition (`skip: start if(not ENGINES, reason=...)`) is a cell that
  prints the page's reason when the condition holds and runs the code otherwise.
- A script with a command line (`snippets/x/run.py`) is written to `run.py` by
  `%%writefile` and run as a module by `%run -n`: its names join the notebook's namespace,
  its command line stays out, as on the page.
- A solution's code cells are collapsed (`jupyter.source_hidden`), under its answer in a
  `<details>`.

The build publishes the notebook twice: `stage-N/notebooks/<slug>.ipynb` is the page that
mkdocs-jupyter renders (with `execute: false`: the outputs are the suite's recordings; its
math turned into MathML, so the page loads nothing from outside the site; its figures the
site's files, not copies inlined in the page), and
`stage-N/notebooks/<slug>/<slug>.ipynb` the file its download button gives. Each topic
page's install box links to its notebook. The test suite executes the notebooks and
compares their outputs with the page's (tests/site/test_notebooks.py).
"""

from __future__ import annotations

import ast
import io
import json
import posixpath
import re
import shlex
import shutil
import tempfile
import tokenize
from collections import Counter
from pathlib import Path

import curriculum
import notebook_markdown as md
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File
from notebook_setup import EVENT_LOOP, FAILED_CHECK, SETUP
from page_blocks import Example, Skip, blocks_of, read_page, split_transcript, transcript
from published_wheel import DOWNLOADS, install_box, install_commands, wheel_url
from recorded_outputs import Run, is_a_page, key_of, load, package_hash

NOTEBOOKS = "notebooks"
SKIP_EXECUTION = "skip-execution"  # the install cell: the suite runs the installed package
KERNEL = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
FOLDED = {"jupyter": {"source_hidden": True}}  # JupyterLab shows the cell's code folded


def notebook_uri(page_uri: str) -> str:
    """Where the notebook of the page at `page_uri` (under docs/) is rendered."""
    folder, name = posixpath.split(page_uri)
    return posixpath.join(folder, NOTEBOOKS, posixpath.splitext(name)[0] + ".ipynb")


def download_uri(page_uri: str) -> str:
    """Where the file the notebook's download button gives is published."""
    rendered = notebook_uri(page_uri)
    return posixpath.join(posixpath.splitext(rendered)[0], posixpath.basename(rendered))


def install_line(wheel_url: str) -> str:
    """The install box's `pip` line as a notebook runs it."""
    pip = install_commands(wheel_url)[1]
    assert pip[:4] == ["python", "-m", "pip", "install"], pip
    return "%pip install " + shlex.join(pip[4:])


def notebook(
    page: Path, title: str, site: md.Site, wheel_url: str, package: str | None = None
) -> dict:
    """The notebook of `page` (a Markdown file), as nbformat 4 JSON data; `package` is
    the package's hash (recorded_outputs.package_hash), which keys the recordings."""
    raw, resolved = read_page(page)
    blocks = blocks_of(raw, resolved)
    text, last = [], 0
    for block in blocks:
        text += [resolved[last : block.start], block.indent + md.PLACEHOLDER.format(block.index)]
        last = block.end
    text.append(resolved[last:])
    runs = _current_runs(page, blocks, package or package_hash())
    machine = Counter(run.machine for run in runs.values()).most_common(1)
    recorded = f", as the project's test suite recorded them on {machine[0][0]}" if machine else ""
    url = site.page_url(site.page)
    cells = [
        _markdown(
            f"# {title}\n\nThis notebook is the page [{title}]({url}), cell by cell: run "
            f"it from the top. The outputs under the cells are those the page shows{recorded}. "
            "The first cell installs the package the site serves (skip it where it is "
            "installed); the next ones set what the page's code needs."
        ),
        _code(install_line(wheel_url), tags=[SKIP_EXECUTION]),
        _code(SETUP),
        _code(EVENT_LOOP, meta=FOLDED),
        _code(FAILED_CHECK.format(machine=machine[0][0] if machine else "the CPU"), meta=FOLDED),
    ]
    for piece in md.cells("".join(text), site):
        if piece[0] == "markdown":
            cells.append(_markdown(piece[1], piece[2]))
        else:
            block = blocks[piece[1]]
            solution = any(c.mark.startswith("???") for c in piece[2])
            for example, output in zip(block.examples, _outputs(block, runs), strict=True):
                cells += _example_cells(example, output, hidden=solution)
    for number, cell in enumerate(cells):
        cell["id"] = f"cell-{number}"
    return {
        "cells": cells,
        "metadata": {"kernelspec": KERNEL, "language_info": {"name": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def _current_runs(page: Path, blocks, package: str) -> dict[int, Run]:
    """Block index -> its CPU recording, where it is current."""
    if not is_a_page(page):
        return {}
    stored = load(page)
    found = {}
    for block in blocks:
        run = stored.get(block.index, {}).get("cpu")
        if run is not None and run.key == key_of(block.body, package):
            found[block.index] = run
    return found


def _outputs(block, runs: dict[int, Run]) -> list[str | None]:
    """What each example of `block` printed in the recorded run (None: not recorded)."""
    run = runs.get(block.index)
    if block.language == "python":
        return [run.output if run else None]
    if run is None:  # what the page shows
        return [
            f"Traceback (most recent call last):\n...\n{e.exc_msg}" if e.exc_msg else e.want
            for e in block.examples
        ]
    return split_transcript(run.output, block.examples)


def _example_cells(example: Example, output: str | None, hidden: bool) -> list[dict]:
    meta = {"llmserve": {"block": example.block, "example": example.number}}
    if hidden:
        meta.update(FOLDED)
    if example.skip and example.skip.condition is None:
        return [_markdown(_listing(example), meta=meta)]
    outputs = _output(example, output) if output else []
    source = example.source.rstrip("\n")
    if example.module:
        script = f"%%writefile {example.module}.py\n{source}"
        run = f"%run -n {example.module}.py"
        run = guarded(run, example.skip) if example.skip else run
        return [_code(script, meta=meta), _code(run, meta=meta)]
    if example.skip:
        source = guarded(source, example.skip)
    tags = ["raises-exception"] if example.exc_msg else []
    return [_code(source, outputs, meta=meta, tags=tags)]


def guarded(source: str, skip: Skip) -> str:
    """A cell that prints the page's reason when `skip`'s condition holds, else runs
    `source` (a cell of one statement shows the values in it: see SETUP)."""
    body = _indented(source)
    return f"if {skip.condition}:\n    print({'Skipped: ' + skip.reason!r})\nelse:\n{body}"


def _indented(source: str) -> str:
    """`source` indented one level, but not the lines inside a multi-line string."""
    inside = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.STRING and token.end[0] > token.start[0]:
            inside.update(range(token.start[0] + 1, token.end[0] + 1))
    return "\n".join(
        line if n in inside or not line.strip() else "    " + line
        for n, line in enumerate(source.split("\n"), 1)
    )


def _listing(example: Example) -> str:
    if example.language == "python":
        return f"```python\n{example.source.rstrip()}\n```"
    return f"```pycon\n{transcript(example.source, example.want).rstrip()}\n```"


def _output(example: Example, text: str) -> list[dict]:
    if example.exc_msg is not None:
        name, _, value = text.rstrip("\n").rpartition("\n")[2].partition(": ")
        lines = text.rstrip("\n").split("\n")
        return [{"output_type": "error", "ename": name, "evalue": value, "traceback": lines}]
    if example.language == "pycon" and _is_expression(example.source):
        return [
            {
                "output_type": "execute_result",
                "execution_count": None,
                "data": {"text/plain": text.rstrip("\n")},
                "metadata": {},
            }
        ]
    return [{"output_type": "stream", "name": "stdout", "text": text}]


def _is_expression(source: str) -> bool:
    """Whether a prompt shows `source`'s value: its last statement is a bare expression."""
    last = ast.parse(source).body[-1]
    return isinstance(last, ast.Expr) and not (
        isinstance(last.value, ast.Call) and getattr(last.value.func, "id", "") == "print"
    )


def _markdown(source: str, attachments: dict | None = None, meta: dict | None = None) -> dict:
    cell = {"cell_type": "markdown", "metadata": dict(meta or {}), "source": source}
    if attachments:
        cell["attachments"] = attachments
    return cell


def _code(source: str, outputs=(), meta: dict | None = None, tags=()) -> dict:
    metadata = dict(meta or {})
    if tags:
        metadata["tags"] = list(tags)
    return {
        "cell_type": "code",
        "execution_count": None,
        "metadata": metadata,
        "outputs": list(outputs),
        "source": source,
    }


def rendered(data: dict, site: md.Site) -> dict:
    """The notebook as its page on the site shows it: math as MathML, and each figure the
    site's own file, which the browser fetches beside the page, not the cell's attached copy
    (mkdocs-jupyter inlines that as base64, which the phone parses before it draws: 265 KB
    of the scheduler notebook's 803 KB)."""
    here = posixpath.splitext(notebook_uri(site.page))[0]  # the page's folder on the site
    cells = []
    for cell in data["cells"]:
        if cell["cell_type"] == "markdown":
            source = md.with_mathml(cell["source"])
            for name in cell.get("attachments", {}):
                link = posixpath.relpath(site.attached[name], here)
                source = source.replace(f"](attachment:{name})", f"]({link})")
            cell = {k: v for k, v in cell.items() if k != "attachments"} | {"source": source}
        cells.append(cell)
    return {**data, "cells": cells}


def dumps(data: dict) -> str:
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


# --- MkDocs events ------------------------------------------------------------------

_state: dict = {}


@event_priority(100)  # before mkdocs-jupyter's on_files, which makes .ipynb files pages
def on_files(files, config):
    work = Path(tempfile.mkdtemp(prefix="llmserve-notebooks-"))
    graph = curriculum.load()
    written = curriculum.written_pages(graph, Path(config["docs_dir"]))
    titles = {page: graph.by_slug[slug].title for slug, page in written.items()}
    downloads = {}
    for page in titles:
        shown = work / notebook_uri(page)
        shown.parent.mkdir(parents=True, exist_ok=True)
        shown.write_text("{}", encoding="utf-8")  # written in on_nav, with the wheel's URL
        # A file of a source folder of its own: mkdocs-jupyter's page finds its path there.
        files.append(
            File(
                notebook_uri(page),
                src_dir=str(work),
                dest_dir=config.site_dir,
                use_directory_urls=config.use_directory_urls,
            )
        )
        downloads[page] = File.generated(config, download_uri(page), content=b"")
        files.append(downloads[page])
    _state.update(work=work, titles=titles, downloads=downloads)
    return files


def _wheel_url(files, config) -> str:
    """The URL of the wheel hooks/published_wheel.py put into the site."""
    (wheel,) = [
        f for f in files if f.src_uri.startswith(f"{DOWNLOADS}/") and f.src_uri.endswith(".whl")
    ]
    return wheel_url(config.site_url, wheel.src_uri)


def on_nav(nav, config, files):
    """Every notebook, now that the wheel and the figures are in the site, before the pages
    are read (mkdocs-jupyter reads a notebook's file as its page's source)."""

    def figure(path: str) -> str | None:
        found = files.get_file_from_path(path)
        return None if found is None else found.content_string

    wheel_url = _wheel_url(files, config)
    site_url = config.site_url.rstrip("/") + "/"
    package = package_hash()
    for page, title in _state["titles"].items():
        site = md.Site(site_url, page, figure)
        data = notebook(Path(config["docs_dir"]) / page, title, site, wheel_url, package)
        (_state["work"] / notebook_uri(page)).write_text(dumps(rendered(data, site)), "utf-8")
        _state["downloads"][page].content_bytes = dumps(data).encode()
    _state["wheel_url"] = wheel_url
    return nav


def on_page_markdown(markdown, page, config, files):
    """A topic page's install box links to its notebook (this hook runs after
    hooks/published_wheel.py, which put the box there)."""
    if page.file.src_uri not in _state["titles"]:
        return markdown
    box = install_box(_state["wheel_url"])
    name = posixpath.basename(download_uri(page.file.src_uri))
    link = posixpath.relpath(notebook_uri(page.file.src_uri), posixpath.dirname(page.file.src_uri))
    line = (
        f"\n    Or work through this page in Jupyter: [its notebook]({link}) holds every "
        "example in a cell, with its output, and a button that downloads it. With the "
        f"environment above, `python -m pip install jupyterlab`, then `jupyter lab {name}`.\n"
    )
    return markdown.replace(box, box + line, 1)


# What nbconvert's template puts on a notebook's page to fetch from a CDN: MathJax (with no
# URL set, an empty `src`, and its configuration), Mermaid (for diagrams, which ours lack).
CDN_SCRIPTS = re.compile(
    r'<script src="">\s*</script>|<script type="text/x-mathjax-config">.*?</script>'
    r'|<script type="module">(?:(?!</script>).)*?mermaid(?:(?!</script>).)*</script>',
    re.DOTALL,
)


# Code that scrolls sideways must take the keyboard's focus (WCAG 2.1.1), as on the pages.
FOCUSABLE = {
    '<div class="highlight-ipynb': '<div tabindex="0" class="highlight-ipynb',
    '<div class="highlight"><pre>': '<div class="highlight"><pre tabindex="0">',
}


# mkdocs-jupyter draws each cell's copy button with its own copy of one icon (an SVG of two
# paths, 1.2 KB: 180 KB of a notebook page of 148 cells); the page holds it once, and each
# button's SVG uses it, drawn in the button's colour as before.
COPY_ICON = re.compile(r'(<svg [^>]*class="clipboard-copy-icon"[^>]*>)\s*(.*?)\s*</svg>', re.S)
COPY_ICON_ID = "clipboard-copy-icon-paths"


def icon_once(html: str) -> str:
    """`html` with every copy button's icon a `<use>` of one definition, put in front."""
    first = COPY_ICON.search(html)
    if first is None:
        return html
    definition = (
        '<svg aria-hidden="true" width="0" height="0" style="position: absolute">'
        f'<defs><g id="{COPY_ICON_ID}">{first[2]}</g></defs></svg>'
    )
    used = COPY_ICON.sub(lambda m: f'{m[1]}<use href="#{COPY_ICON_ID}"></use></svg>', html)
    return definition + used


def on_page_content(html, page, config, files):
    """A notebook's page: under its title, the button that downloads it and a link back;
    none of the scripts that would load from outside the site; its code focusable; its
    copy buttons' icon defined once; not in the search index."""
    source = next((s for s in _state["titles"] if notebook_uri(s) == page.file.src_uri), None)
    if source is None:
        return html
    # Out of the search index: its page says the same, and the index, which every page
    # downloads and builds at load, was more than half notebooks.
    page.meta["search"] = {"exclude": True}
    html = CDN_SCRIPTS.sub("", html)
    for before, after in FOCUSABLE.items():
        html = html.replace(before, after)
    html = icon_once(html)
    back = posixpath.relpath(files.get_file_from_path(source).url, page.url) + "/"
    buttons = (
        f'<p class="notebook-download"><a class="md-button md-button--primary" '
        f'href="{posixpath.basename(download_uri(source))}" download>Download the notebook</a> '
        f'<a class="md-button" href="{back}">Read {_state["titles"][source]} as a page</a></p>'
    )
    head, found, tail = html.partition("</h1>")
    return head + found + buttons + tail if found else buttons + html


def on_post_build(config):
    if "work" in _state:
        shutil.rmtree(_state.pop("work"), ignore_errors=True)
