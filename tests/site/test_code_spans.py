"""hooks/code_spans.py: its examples, and the oracles its claim rests on: Material's own
stylesheet (the installed theme's), with ours, draws a name's span in the code's colour and
gives a whitespace span no style; on a notebook's page, nbconvert's Pygments stylesheet and
mkdocs-jupyter's JupyterLab ones give a name no rule and whitespace a colour alone, and ours
draws a name in the colour of the code around it. So the spans the build drops changed no
pixel."""

from __future__ import annotations

import doctest
import re
import sys
from pathlib import Path

import material
from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
from pygments.formatters import HtmlFormatter

from conftest import ROOT

sys.path.insert(0, str(ROOT / "hooks"))

import code_spans
from notebook_css import jupyterlab_css

STYLESHEETS = [
    *(Path(material.__file__).parent / "templates/assets/stylesheets").glob("main.*.min.css"),
    *(ROOT / "docs/stylesheets").glob("*.css"),
]


NOTEBOOKS_CSS = ROOT / "docs/stylesheets/notebooks.css"


def rules(css: str) -> list[tuple[str, str]]:
    """(selector list, declarations) of each rule, comments dropped."""
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.S)
    return re.findall(r"([^{}]+)\{([^{}]*)\}", css)


def by_selector(css: str) -> list[tuple[str, str, str]]:
    """(selector, its last compound, declarations) of each selector of each rule."""
    found = []
    for selectors, declarations in rules(css):
        for selector in map(str.strip, selectors.split(",")):
            found.append((selector, selector.split()[-1] if selector else "", declarations))
    return found


def test_its_examples():
    assert doctest.testmod(code_spans).failed == 0


def test_material_styles_a_name_as_plain_code_and_whitespace_not_at_all():
    assert len(STYLESHEETS) > 1  # Material's and ours
    name_rules, custom_properties = [], {}
    for sheet in STYLESHEETS:
        for selector, last, declarations in by_selector(sheet.read_text()):
            assert last != ".w", f"{sheet.name} styles whitespace: {selector}"
            if last == ".n" and ".highlight-ipynb" not in selector:
                name_rules.append(declarations)
        for _, declarations in rules(sheet.read_text()):
            for name, value in re.findall(r"(--md-code-hl-name-color):([^;}]+)", declarations):
                custom_properties.setdefault(name, set()).add(value.strip())
    assert name_rules == ["color:var(--md-code-hl-name-color)"]
    # Set once, to the code's own colour, in both schemes (no scheme overrides it).
    assert custom_properties == {"--md-code-hl-name-color": {"var(--md-code-fg-color)"}}


def test_a_notebook_page_styles_a_name_as_its_code_and_whitespace_with_a_colour_alone():
    # What mkdocs-jupyter inlines into a notebook's page: JupyterLab's stylesheets, whole, and
    # nbconvert's Pygments rules, under `.highlight-ipynb`, in the style nbconvert uses.
    pygments = HtmlFormatter(style=CSSHTMLHeaderPreprocessor().style)
    sheets = {
        "nbconvert's Pygments": pygments.get_style_defs(".highlight-ipynb"),
        **{name: css for css, name in jupyterlab_css().items()},
    }
    assert "index.css" in sheets
    found = {".n": [], ".w": []}
    for sheet, css in sheets.items():
        for _, last, declarations in by_selector(css):
            if last in found:
                found[last].append((sheet, declarations.strip()))
    assert found[".n"] == []
    assert {d.split(":")[0].strip() for _, d in found[".w"]} == {"color"}, found[".w"]
    # Ours: a name in Material's name colour (the code's own: the test above), and the
    # cell's code around it in the code's colour.
    ours = {s.strip(): d.strip() for s, d in rules(NOTEBOOKS_CSS.read_text())}
    assert ours[".jupyter-wrapper .highlight-ipynb :is(.kc, .n)"] == (
        "color: var(--md-code-hl-name-color);"
    )
    code = ".jupyter-wrapper .highlight-ipynb,\n.jupyter-wrapper .jp-OutputArea-output pre"
    assert ours[code] == "color: var(--md-code-fg-color);"
