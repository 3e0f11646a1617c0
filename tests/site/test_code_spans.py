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
import mkdocs_jupyter
from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
from pygments.formatters import HtmlFormatter

from conftest import ROOT

sys.path.insert(0, str(ROOT / "hooks"))

import code_spans

STYLESHEETS = [
    *(Path(material.__file__).parent / "templates/assets/stylesheets").glob("main.*.min.css"),
    *(ROOT / "docs/stylesheets").glob("*.css"),
]


# What mkdocs-jupyter inlines into a notebook's page: JupyterLab's stylesheets (its assets)
# and nbconvert's Pygments rules, under `.highlight-ipynb`, in the style nbconvert uses.
JUPYTER_ASSETS = Path(mkdocs_jupyter.__file__).parent / "templates/mkdocs_html/assets"
NOTEBOOKS_CSS = ROOT / "docs/stylesheets/notebooks.css"


def rules(css: str) -> list[tuple[str, str]]:
    """(selector list, declarations) of each rule, comments dropped."""
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.S)
    return re.findall(r"([^{}]+)\{([^{}]*)\}", css)


def test_its_examples():
    assert doctest.testmod(code_spans).failed == 0


def test_material_styles_a_name_as_plain_code_and_whitespace_not_at_all():
    assert len(STYLESHEETS) > 1  # Material's and ours
    name_rules, custom_properties = [], {}
    for sheet in STYLESHEETS:
        for selectors, declarations in rules(sheet.read_text()):
            for selector in selectors.split(","):
                last = selector.strip().split()[-1] if selector.strip() else ""
                assert last != ".w", f"{sheet.name} styles whitespace: {selector}"
                if last == ".n" and ".highlight-ipynb" not in selector:
                    name_rules.append(declarations)
            for name, value in re.findall(r"(--md-code-hl-name-color):([^;}]+)", declarations):
                custom_properties.setdefault(name, set()).add(value.strip())
    assert name_rules == ["color:var(--md-code-hl-name-color)"]
    # Set once, to the code's own colour, in both schemes (no scheme overrides it).
    assert custom_properties == {"--md-code-hl-name-color": {"var(--md-code-fg-color)"}}


def test_a_notebook_page_styles_a_name_as_its_code_and_whitespace_with_a_colour_alone():
    pygments = HtmlFormatter(style=CSSHTMLHeaderPreprocessor().style)
    sheets = {
        "nbconvert's Pygments": pygments.get_style_defs(".highlight-ipynb"),
        **{s.name: s.read_text() for s in sorted(JUPYTER_ASSETS.glob("*.css"))},
    }
    assert "index.css" in sheets  # JupyterLab's, whole
    found = {".n": [], ".w": []}
    for sheet, css in sheets.items():
        for selectors, declarations in rules(css):
            for selector in selectors.split(","):
                last = selector.strip().split()[-1] if selector.strip() else ""
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
