"""MkDocs hook: turn LaTeX into MathML at build time, so math needs no script or CDN.

pymdownx.arithmatex (generic mode) wraps `$...$` and `$$...$$` in
`<span class="arithmatex">` / `<div class="arithmatex">`; this hook replaces each with
the MathML that latex2mathml produces, which browsers render natively and offline.
"""

from __future__ import annotations

import html
import re

from latex2mathml.converter import convert

INLINE = re.compile(r'<span class="arithmatex">\\\((.+?)\\\)</span>', re.S)
BLOCK = re.compile(r'<div class="arithmatex">\\\[(.+?)\\\]</div>', re.S)


def to_mathml(latex: str, display: str) -> str:
    return convert(html.unescape(latex).strip(), display=display)


def on_page_content(content, page, config, files):
    content = BLOCK.sub(
        # A wide equation scrolls sideways on a phone: focusable, so a keyboard can scroll it.
        lambda m: (
            '<div class="math-display" tabindex="0" role="region" aria-label="equation">'
            f"{to_mathml(m.group(1), 'block')}</div>"
        ),
        content,
    )
    return INLINE.sub(lambda m: to_mathml(m.group(1), "inline"), content)
