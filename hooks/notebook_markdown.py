"""A page's prose as Jupyter Markdown: what the site's extensions draw, in plain CommonMark.

The site's pages use Material's and pymdownx's syntax, which JupyterLab does not know. The
notebook built from a page (hooks/notebooks.py) carries its prose in Markdown cells that
read well there:

- an admonition (`!!! note "Title"`) becomes a block quote under its title in bold, and a
  collapsed block (`??? success "Solution"`) an HTML `<details>` with the title as summary;
- a link to another page (`../stage-6/streaming.md#anchor`) becomes that page's absolute
  URL on the site, and a figure (`figures/x.svg`) the picture itself, attached to the cell;
- a widget that runs in the browser (an HTML block holding a `<form>`) becomes a link to
  it on the page, and HTML comments (the suite's skip directives) go;
- math stays `$...$` (JupyterLab draws it); `with_mathml` turns it into MathML for the
  notebook's page on the site, as hooks/mathml.py does for the pages.

Where a python or pycon block stood, the caller leaves a placeholder line; `cells` splits
the prose there, so that the block's code cells come between the Markdown cells, and a
container cut by a block is closed before it and opened again, "(continued)", after it.
"""

from __future__ import annotations

import base64
import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from mathml import to_mathml

PLACEHOLDER = "\x00block {}\x00"
BLOCK = re.compile(r"^[ \t]*\x00block (\d+)\x00[ \t]*$")
OPENER = re.compile(
    r'^(?P<mark>!!!|\?\?\?\+?|===)[ \t]*(?P<kind>[\w-]*)[ \t]*(?:"(?P<title>[^"]*)")?$'
)
FENCE_LINE = re.compile(r"^[ \t]*(?P<fence>`{3,}|~{3,})")
HEADING = re.compile(r"^#{1,6} ")
COMMENT = re.compile(r"^[ \t]*<!--.*?-->[ \t]*\n", re.MULTILINE | re.DOTALL)
LINK = re.compile(r"(?P<bang>!?)\[(?P<text>[^\]\n]*(?:\n[^\]\n]*)*)\]\((?P<target>[^)\s]+)\)")
# Code, where nothing is rewritten: fenced blocks (also inside block quotes), inline spans.
CODE = re.compile(
    r"^(?P<q>(?:>[ \t]?)*)[ \t]*(?P<f>`{3,}|~{3,}).*?^(?P=q)[ \t]*(?P=f)[ \t]*$|(?P<t>`+).+?(?P=t)",
    re.MULTILINE | re.DOTALL,
)
# Math as pymdownx.arithmatex finds it: $$...$$, or $...$ with no space inside its dollars
# and no digit after them ("$2.50 a GPU-hour and $3" is prose).
MATH = re.compile(
    r"\$\$(?P<display>.+?)\$\$"
    r"|(?<![\\$])\$(?![\s$])(?P<inline>(?:\\.|[^\\$\n])+?)(?<!\s)\$(?!\d)",
    re.DOTALL,
)


@dataclass(eq=False)
class Container:
    """An admonition, a collapsed block or a tab: its content is indented under its opener."""

    indent: int  # the indentation of its content
    mark: str
    kind: str
    title: str
    shown: bool = False  # whether a cell already showed its first part


@dataclass
class Site:
    """Where the page lives on the site, and how to embed a figure (None: link to it)."""

    url: str  # the site's root URL, ending in /
    page: str  # the page's path under docs/, such as stage-1/tokens.md
    figure: Callable[[str], str | None] = lambda path: None
    attached: dict[str, str] = field(default_factory=dict)  # a figure's name -> its path

    def page_url(self, path: str) -> str:
        """The address of the page at `path` (under docs/), with directory URLs."""
        stem = path.removesuffix(".md")
        stem = "" if stem == "index" else stem.removesuffix("/index")
        return self.url + (stem + "/" if stem else "")


def cells(text: str, site: Site) -> list[tuple[str, object]]:
    """`text`, a page with a placeholder where each block stood, as a list of
    ("markdown", source, attachments) and ("block", index, its containers) pieces, in page
    order."""
    pieces: list[tuple[str, object]] = []
    run: list[tuple[str, tuple[Container, ...]]] = []

    def flush() -> None:
        source = "\n".join(_render(run, 0, site)).strip("\n")
        if source.strip():
            attachments: dict = {}
            pieces.append(("markdown", _figures(source, site, attachments), attachments))
        run.clear()

    for kind, value, path in _lines(_without_widgets(COMMENT.sub("", text), site)):
        if kind == "block":
            flush()
            pieces.append(("block", value, path))
        else:
            if not path and HEADING.match(value) and run:
                flush()  # one cell per section: JupyterLab folds a cell under its heading
            run.append((value, path))
    flush()
    return pieces


def _lines(text: str):
    """Each line without its containers' indentation, with its containers, or a block."""
    stack: list[Container] = []
    fence = ""
    for line in text.split("\n"):
        width = len(line) - len(line.lstrip(" "))
        if line.strip() and not fence:
            while stack and width < stack[-1].indent:
                stack.pop()
        depth = stack[-1].indent if stack else 0
        inner = line[depth:] if line[:depth].strip() == "" else line.lstrip(" ")
        if fence:
            fence = "" if inner.strip() == fence else fence
        elif (block := BLOCK.match(line)) is not None:
            yield "block", int(block[1]), tuple(stack)
            continue
        elif (opener := OPENER.match(inner)) is not None:
            title = opener["title"] if opener["title"] is not None else opener["kind"].title()
            stack.append(Container(depth + 4, opener["mark"], opener["kind"], title))
            continue
        elif (start := FENCE_LINE.match(inner)) is not None:
            fence = start["fence"]
        yield "line", inner, tuple(stack)


def _render(run: list[tuple[str, tuple[Container, ...]]], depth: int, site: Site) -> list[str]:
    """The lines of `run`, each container at `depth` wrapped as JupyterLab shows it."""
    out: list[str] = []
    i = 0
    while i < len(run):
        container = run[i][1][depth] if len(run[i][1]) > depth else None
        j = i
        while j < len(run) and (run[j][1][depth] if len(run[j][1]) > depth else None) is container:
            j += 1
        if container is None or not any(line.strip() for line, _ in run[i:j]):
            out += _prose("\n".join(line for line, _ in run[i:j]), site).split("\n")
        else:
            out += _wrap(container, _render(run[i:j], depth + 1, site))
        i = j
    return out


def _wrap(container: Container, inner: list[str]) -> list[str]:
    while inner and not inner[0].strip():
        inner = inner[1:]
    while inner and not inner[-1].strip():
        inner = inner[:-1]
    title = container.title + (" (continued)" if container.shown else "")
    container.shown = True
    if container.mark == "===":  # a tab: its title, then its content
        return ["", f"**{title}**", "", *inner, ""]
    if container.mark.startswith("???"):
        opened = " open" if container.mark.endswith("+") else ""
        summary = f"<details{opened}><summary>{title}</summary>"
        return ["", summary, "", *inner, "", "</details>", ""]
    quoted = [f"> {line}" if line.strip() else ">" for line in [f"**{title}**", "", *inner]]
    return ["", *quoted, ""]


def outside_code(text: str, change: Callable[[str], str]) -> str:
    """`text` with `change` applied to its prose, not to its code blocks and spans."""
    out, last = [], 0
    for code in CODE.finditer(text):
        out += [change(text[last : code.start()]), code.group()]
        last = code.end()
    return "".join([*out, change(text[last:])])


def _prose(text: str, site: Site) -> str:
    """Links made absolute: a page's to its URL on the site, an anchor to this page's."""

    def absolute(link: re.Match) -> str:
        target = link["target"]
        if link["bang"] or re.match(r"[a-z][a-z0-9+.-]*:", target):
            return link.group()  # a figure (embedded later) or an outside address
        path, _, anchor = target.partition("#")
        here = posixpath.dirname(site.page)
        url = site.page_url(posixpath.normpath(posixpath.join(here, path)) if path else site.page)
        return f"[{link['text']}]({url}{'#' + anchor if anchor else ''})"

    return outside_code(text, lambda prose: _dollars(LINK.sub(absolute, prose)))


def _dollars(prose: str) -> str:
    """Each `$` that opens no math escaped: Jupyter would typeset a price as math."""
    out, last = [], 0
    for math in MATH.finditer(prose):
        out += [prose[last : math.start()].replace("$", "\\$"), math.group()]
        last = math.end()
    return "".join([*out, prose[last:].replace("$", "\\$")])


def _figures(source: str, site: Site, attachments: dict) -> str:
    """Each figure of the page attached to its cell (or, without it, linked on the site)."""

    def embed(link: re.Match) -> str:
        if not link["bang"] or re.match(r"[a-z][a-z0-9+.-]*:", link["target"]):
            return link.group()
        path = posixpath.normpath(posixpath.join(posixpath.dirname(site.page), link["target"]))
        svg = site.figure(path)
        if svg is None:
            return f"![{link['text']}]({site.url}{path})"
        name = posixpath.basename(path)
        attachments[name] = {"image/svg+xml": base64.b64encode(svg.encode()).decode()}
        site.attached[name] = path
        return f"![{link['text']}](attachment:{name})"

    return outside_code(source, lambda prose: LINK.sub(embed, prose))


def _without_widgets(text: str, site: Site) -> str:
    """Each HTML block that holds a form (a widget run by the site's JavaScript) replaced
    by a link to it on the page."""
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        opened = re.match(r'<div\b[^>]*\bid="(?P<id>[^"]+)"', lines[i])
        if opened is None:
            out.append(lines[i])
            i += 1
            continue
        depth, j = 0, i
        while j < len(lines):
            depth += lines[j].count("<div") - lines[j].count("</div>")
            j += 1
            if depth <= 0:
                break
        html = "\n".join(lines[i:j])
        if "<form" in html:
            url = f"{site.page_url(site.page)}#{opened['id']}"
            html = f"> This part of the page runs in your browser: [use it on the page]({url})."
        out.append(html)
        i = j
    return "\n".join(out)


def with_mathml(source: str) -> str:
    """A Markdown cell with its math as MathML, for the notebook's page on the site."""

    def convert(math: re.Match) -> str:
        if math["display"] is not None:
            return to_mathml(math["display"], "block")
        return to_mathml(math["inline"], "inline")

    return outside_code(source, lambda prose: MATH.sub(convert, prose))
