"""hooks/code_spans.py: its examples, and the oracle its claim rests on: Material's own
stylesheet (the installed theme's), with ours, draws a name's span in the code's colour and
gives a whitespace span no style, so the spans the build drops changed no pixel."""

from __future__ import annotations

import doctest
import re
import sys
from pathlib import Path

import material

from conftest import ROOT

sys.path.insert(0, str(ROOT / "hooks"))

import code_spans

STYLESHEETS = [
    *(Path(material.__file__).parent / "templates/assets/stylesheets").glob("main.*.min.css"),
    *(ROOT / "docs/stylesheets").glob("*.css"),
]


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
