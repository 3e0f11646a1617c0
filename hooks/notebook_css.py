"""MkDocs hook: a notebook's page keeps only the JupyterLab CSS that can style it.

mkdocs-jupyter inlines JupyterLab's whole stylesheet (its `index.css`, some 575 KB with the
rules of every menu, dialog and widget of the lab) and its light theme into every notebook
page. A phone spent seconds on its style and layout: Lighthouse scored those pages 59 to 79
for mobile performance. This hook keeps, of those two stylesheets:

- each rule with a selector that can match the page: one whose every class and id (outside
  `:not()`, `:is()` and the other functional pseudo-classes, which are kept as they are) is a
  word of the page's HTML or of a script that can add it (Material's wraps each table in a
  `div.md-typeset__scrollwrap`), the words PurgeCSS's default extractor reads. A rule keeps
  only such selectors; the others match no element.
- each custom property (`--jp-ui-font-size1: 13px`) that a kept declaration reads with
  `var()`, or that the page or the site's own stylesheets and scripts (Material's too) name.
- every other at-rule (`@keyframes`, `@charset`), whole; `@media` and `@supports` trimmed
  inside.

The page's other inline styles (Pygments' colours, a few lines) are left as they are.
tests/site/test_notebook_css.py checks in Chromium that no dropped selector matches an
element of any notebook page and that every property a page reads is still defined.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace
from pathlib import Path

import mkdocs_jupyter
import tinycss2
from tinycss2 import ast

# The stylesheets that mkdocs-jupyter's template inlines into every notebook page.
TRIMMED = ("index.css", "theme-light.css", "theme-dark.css")
ASSETS = Path(mkdocs_jupyter.__file__).parent / "templates" / "mkdocs_html" / "assets"
STYLE = re.compile(r"<style[^>]*>(.*?)</style>", re.S)
WORD = re.compile(r"[\w-]+")
VAR = re.compile(r"var\(\s*(--[\w-]+)")
PROPERTY = re.compile(r"--[\w-]+")


@dataclass(frozen=True)
class Rule:
    """A style rule: its selectors, each with the classes and ids it needs, and its
    declarations, each with the custom property it defines (or None)."""

    selectors: tuple[tuple[str, frozenset[str]], ...]
    declarations: tuple[tuple[str | None, str], ...]


@dataclass(frozen=True)
class Block:
    """An at-rule that holds rules (`@media`, `@supports`): its prelude and its rules."""

    prelude: str
    rules: tuple[Rule | Block | str, ...]


def needs(selector: list) -> frozenset[str]:
    """The classes and ids a selector names outside its functional pseudo-classes: an
    element it matches has them all.

    >>> sorted(needs(tinycss2.parse_component_value_list(".a .b:not(.c) > #d[x=y]:hover")))
    ['a', 'b', 'd']
    """
    found = set()
    for before, token in zip([None, *selector], selector, strict=False):
        is_class = token.type == "ident" and isinstance(before, ast.LiteralToken) and before == "."
        if is_class or (token.type == "hash" and token.is_identifier):
            found.add(token.value)
    return frozenset(found)


def _split(tokens: list) -> list[list]:
    """The selectors of a selector list: its pieces between top-level commas."""
    pieces: list[list] = [[]]
    for token in tokens:
        if token.type == "literal" and token.value == ",":
            pieces.append([])
        else:
            pieces[-1].append(token)
    return pieces


def _parse(nodes: list) -> tuple[Rule | Block | str, ...]:
    """A stylesheet's rules, with what trimming them needs worked out once."""
    parsed: list[Rule | Block | str] = []
    for node in nodes:
        if node.type == "qualified-rule":
            selectors = tuple(
                (tinycss2.serialize(piece).strip(), needs(piece)) for piece in _split(node.prelude)
            )
            declarations = tuple(
                (d.name if d.name.startswith("--") else None, tinycss2.serialize([d]))
                for d in tinycss2.parse_blocks_contents(node.content, True, True)
                if d.type == "declaration"
            )
            parsed.append(Rule(selectors, declarations))
        elif node.type == "at-rule" and node.lower_at_keyword in ("media", "supports"):
            rules = _parse(tinycss2.parse_rule_list(node.content, True, True))
            parsed.append(Block(f"@{node.at_keyword}{tinycss2.serialize(node.prelude)}", rules))
        elif node.type == "at-rule":
            parsed.append(node.serialize())
    return tuple(parsed)


@functools.cache
def stylesheet(css: str) -> tuple[Rule | Block | str, ...]:
    """`css` parsed once (every notebook page inlines the same stylesheets)."""
    return _parse(tinycss2.parse_stylesheet(css, skip_comments=True, skip_whitespace=True))


def _matching(rules: tuple[Rule | Block | str, ...], words: set[str]) -> tuple:
    """`rules` with only the selectors that can match a page of these words."""
    kept: list[Rule | Block | str] = []
    for rule in rules:
        if isinstance(rule, Rule):
            selectors = tuple(s for s in rule.selectors if s[1] <= words)
            if selectors:
                kept.append(replace(rule, selectors=selectors))
        elif isinstance(rule, Block):
            inner = _matching(rule.rules, words)
            if inner:
                kept.append(replace(rule, rules=inner))
        else:
            kept.append(rule)
    return tuple(kept)


def _declared(rule: Rule, read: set[str]) -> list[str]:
    """The declarations of `rule` that are kept: all but the custom properties not read."""
    return [text for name, text in rule.declarations if name is None or name in read]


def _reads(rules: tuple, read: set[str]) -> set[str]:
    """The custom properties read by what is kept of `rules`, given those `read` already."""
    found: set[str] = set()
    for rule in rules:
        if isinstance(rule, Rule):
            found.update(*(VAR.findall(text) for text in _declared(rule, read)))
        elif isinstance(rule, Block):
            found |= _reads(rule.rules, read)
        else:
            found |= set(VAR.findall(rule))
    return found


def _serialize(rules: tuple, read: set[str]) -> str:
    out = []
    for rule in rules:
        if isinstance(rule, Rule):
            body = "".join(_declared(rule, read))
            if body:
                out.append(",".join(text for text, _ in rule.selectors) + "{" + body + "}")
        elif isinstance(rule, Block):
            inner = _serialize(rule.rules, read)
            if inner:
                out.append(rule.prelude + "{" + inner + "}")
        else:
            out.append(rule)
    return "".join(out)


def trim(css: str, page: str, elsewhere: str = "") -> str:
    """The rules of `css` that can style `page` (HTML, without this CSS) or what a script of
    `elsewhere` (the site's other stylesheets and scripts) adds to it, and only the custom
    properties named there, or read by those rules.

    >>> trim(".a{color:var(--x)}.b{color:var(--y)}.a{--x:1;--y:2;--z:3}", '<p class="a">')
    '.a{color:var(--x);}.a{--x:1;}'
    """
    words, named = _names(elsewhere)
    kept = _matching(stylesheet(css), set(WORD.findall(page)) | words)
    # Named at all in the page or elsewhere: read with var(), or by a script.
    read = set(PROPERTY.findall(page)) | named
    while more := _reads(kept, read) - read:  # a property read by a kept property is read
        read |= more
    return _serialize(kept, read)


@functools.cache
def _names(text: str) -> tuple[frozenset[str], frozenset[str]]:
    """The words and the custom property names in `text`, found once: every notebook page
    reads the same site stylesheets and scripts (Material's bundle among them)."""
    return frozenset(WORD.findall(text)), frozenset(PROPERTY.findall(text))


@functools.cache
def jupyterlab_css() -> dict[str, str]:
    """Each stylesheet that mkdocs-jupyter inlines, as its template writes it: text -> name."""
    return {(ASSETS / name).read_text().strip(): name for name in TRIMMED}


@functools.cache
def _elsewhere(docs_dir: str, theme_dirs: tuple[str, ...]) -> str:
    """The site's own stylesheets and scripts, and its theme's: what else reads a property."""
    return "".join(
        path.read_text(errors="replace")
        for folder in (*theme_dirs, docs_dir)
        for path in sorted(Path(folder).rglob("*"))
        if path.suffix in (".css", ".js") and path.is_file()
    )


def on_post_page(output: str, page, config) -> str:
    """A notebook's page, its inlined JupyterLab stylesheets trimmed, each marked with the
    file it was trimmed from (`<style data-trimmed="index.css">`)."""
    if not page.file.src_uri.endswith(".ipynb"):
        return output
    inlined = jupyterlab_css()
    rest = STYLE.sub(lambda m: "" if m.group(1).strip() in inlined else m.group(0), output)
    elsewhere = _elsewhere(config.docs_dir, tuple(config.theme.dirs))

    def trimmed(style: re.Match) -> str:
        name = inlined.get(style.group(1).strip())
        if name is None:
            return style.group(0)
        return (
            f'<style data-trimmed="{name}">{trim(style.group(1).strip(), rest, elsewhere)}</style>'
        )

    return STYLE.sub(trimmed, output)
