"""MkDocs hook: a code block keeps only the spans that colour something.

Pygments wraps every token of a highlighted block in a span named for its kind, and a long
page's code is most of its elements: the stage-9 page had 6,082, of them 1,182 spans around
plain names (`n`) and 335 around whitespace (`w`). Material draws a name in the code's own
colour (`.highlight .n` is `--md-code-hl-name-color`, which it sets to `--md-code-fg-color`,
in both schemes) and gives whitespace no style, so those spans change no pixel; what they
cost is the phone's time: the browser matches styles against every element as the page
loads (Lighthouse's mobile audit, `nox -s site-audit`, measured most of a long page's
main-thread time in style and layout). The build writes their text without them.

A notebook's page (mkdocs-jupyter's, under `.highlight-ipynb`) holds the same code cut into
a cell per example, and more of these spans: 2,030 of the paged-KV notebook's 11,020
elements, the page of that topic 5,806 in all. There nbconvert's Pygments style gives a name
no rule and whitespace a colour alone (which no glyph shows), and docs/stylesheets/
notebooks.css draws a name, as a page does, in Material's name colour, the code's own, which
it also gives the cell's code: the same spans go.
"""

from __future__ import annotations

import re

# A name's or a whitespace run's span around text alone (an entity such as &lt; is text).
UNSTYLED = re.compile(r'<span class="[nw]">([^<]*)</span>')


def unwrapped(html: str) -> str:
    """`html` with the spans of names and whitespace replaced by their text.

    >>> unwrapped('<span class="n">x</span><span class="w"> </span><span class="o">=</span>')
    'x <span class="o">=</span>'
    >>> unwrapped('<span class="nb">len</span><span class="n">a&lt;b</span>')
    '<span class="nb">len</span>a&lt;b'
    """
    return UNSTYLED.sub(r"\1", html)


def on_page_content(html, page, config, files):
    return unwrapped(html)
