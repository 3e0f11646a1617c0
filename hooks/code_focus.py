"""MkDocs hook: every code block can take the keyboard's focus from the first paint.

A block that scrolls sideways must be reachable by Tab (WCAG 2.1.1). Material makes such a
block focusable when it sets the block up, and with `content.lazy` (mkdocs.yml: the page
does no work at load for blocks a reader has not reached) it sets a block up only as it comes
into view, so a wide block further down could not be tabbed to before that. The build marks
every block focusable; Material takes the mark off each one that does not scroll as it sets
it up. A notebook page's Markdown code blocks (nbconvert writes them unhighlighted, and
Material does not set them up) keep the mark.
"""

from __future__ import annotations

# How pymdownx.highlight opens a code block's code, and how nbconvert opens one in a
# notebook's Markdown cell.
CODE = ("<pre><span></span><code>", "<pre><code>")


def focusable(html: str) -> str:
    """Every code block's code in `html`, focusable.

    >>> focusable('<div class="highlight"><pre><span></span><code>x = 1</code></pre></div>')
    '<div class="highlight"><pre><span></span><code tabindex="0">x = 1</code></pre></div>'
    >>> focusable('<pre><code>+---+</code></pre>')
    '<pre><code tabindex="0">+---+</code></pre>'
    """
    for opening in CODE:
        html = html.replace(opening, opening.replace("<code>", '<code tabindex="0">'))
    return html


def on_page_content(html, page, config, files):
    return focusable(html)
