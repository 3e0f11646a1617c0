"""A page's prose, its numbers, and the blocks that back them (tests/site/test_claims.py and
tests/site/test_prose_numbers.py).

A page is read as the suite runs it: includes resolved (tests/pages.py), every fence taken
out of the prose. What is left is what a reader reads as text: paragraphs, lists, tables,
headings, admonitions, inline code and math. The Python blocks are the page's evidence:
what they run and, from `recordings/`, what they printed. So is a snippet's transcript
shown in a ```console block, which tests/site/test_snippets.py checks against the script.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from package_values import substitute
from pages import DOCS, resolve_includes
from recorded_outputs import FENCE as PYTHON_FENCE
from recorded_outputs import dedent, load

# Any fenced block, with its indentation (inside an admonition or a list).
ANY_FENCE = re.compile(
    r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^\n]*)\n"
    r"(?P<body>.*?)^(?P=indent)(?P=fence)[ \t]*$",
    re.MULTILINE | re.DOTALL,
)
TRANSCRIPT = re.compile(r"""^[ \t]*-+8<-+[ \t]+["']snippets/[^"'\n]+\.txt["'][ \t]*$""", re.M)

# A value written into the prose from the package (hooks/package_values.py), marked as such.
FROM, END = "\x02", "\x03"
SUBSTITUTED = re.compile(f"{FROM}[^{END}]*{END}")

# Markup that is not prose: comments (skip directives), link and image targets, attribute
# lists, HTML tags, bare addresses, reference-style link definitions.
NOT_PROSE = [
    re.compile(r"<!--.*?-->", re.DOTALL),
    re.compile(r"(?<=\])\([^)\s]*(?:\s+\"[^\"]*\")?\)"),  # [text](target "title")
    re.compile(r"^\s*\[[^\]]+\]:\s+\S+.*$", re.MULTILINE),  # [label]: target
    re.compile(r"\{[:#.][^}\n]*\}"),  # { .class } attribute lists
    re.compile(r"</?[a-zA-Z][^>\n]*>"),  # HTML tags, not their text
    re.compile(r"https?://[^\s)>\]]+"),
]


@dataclass
class Block:
    """One Python block (or snippet transcript) as the reader sees it, and what it printed."""

    start: int  # offset in the resolved page
    end: int
    language: str
    source: str
    output: str = ""  # recorded (cpu first), for python and pycon blocks

    @property
    def text(self) -> str:
        """What the reader sees of it, numbers as Python writes them (1_000 is 1000)."""
        return re.sub(r"(?<=\d)_(?=\d)", "", f"{self.source}\n{self.output}")


@dataclass
class Page:
    path: Path
    text: str  # resolved, values substituted
    blocks: list[Block] = field(default_factory=list)
    prose_spans: list[tuple[int, int]] = field(default_factory=list)  # outside every fence

    @property
    def name(self) -> str:
        return self.path.relative_to(DOCS).as_posix()

    def prose(self) -> str:
        """The page's text outside its fences, markup removed."""
        return clean("\n".join(self.text[a:b] for a, b in self.prose_spans))

    def block_with(self, marker: str) -> list[Block]:
        """The Python blocks whose source contains `marker`."""
        return [b for b in self.blocks if b.language in ("python", "pycon") and marker in b.source]


def blank(match: re.Match) -> str:
    return " " * len(match.group())


def clean(text: str) -> str:
    """`text` with its markup blanked out, every offset kept."""
    for pattern in NOT_PROSE:
        text = pattern.sub(blank, text)
    return text


def read(path: Path) -> Page:
    """A page, resolved, with its blocks and their recorded outputs."""
    raw = substitute(path.read_text(encoding="utf-8"), mark=lambda value: f"{FROM}{value}{END}")
    text = resolve_includes(raw)
    page = Page(path, text)
    recordings = load(path)
    python_fences = {m.start(): i for i, m in enumerate(PYTHON_FENCE.finditer(text))}
    # An include never adds or removes a fence: the page's fences and the resolved ones pair up.
    written, resolved = list(ANY_FENCE.finditer(raw)), list(ANY_FENCE.finditer(text))
    last = 0
    for mine, fence in zip(written, resolved, strict=True):
        page.prose_spans.append((last, fence.start()))
        last = fence.end()
        language = (fence["info"].split() or [""])[0]
        source = dedent(fence["body"], fence["indent"])
        if fence.start() in python_fences:
            runs = recordings.get(python_fences[fence.start()], {})
            device = min(runs, key=lambda d: d != "cpu", default=None)
            output = runs[device].output if device else ""
            page.blocks.append(Block(fence.start(), fence.end(), language, source, output))
        elif TRANSCRIPT.search(mine["body"]):
            page.blocks.append(Block(fence.start(), fence.end(), language, source))
    page.prose_spans.append((last, len(text)))
    return page


def topic_pages() -> list[Path]:
    return sorted(DOCS.glob("stage-*/*.md"))


def normalized(text: str) -> str:
    """Prose as a sentence is quoted: inline markup gone, whitespace collapsed."""
    text = clean(text).replace(FROM, "").replace(END, "")
    text = re.sub(r"!?\[([^\]]*)\]", r"\1", text)  # link text stays, brackets go
    text = re.sub(r"[`*]|(?<!\w)_|_(?!\w)", "", text)  # code ticks, emphasis
    text = re.sub(r"^[ \t]*(?:[-+]|\d+\.|>|\?\?\?\+?|!!!)[ \t]+", " ", text, flags=re.M)
    return " ".join(text.split())


# A number as prose writes it (1,638 or 0.92 or 3.6x or 12.9% or a 100-token prompt), and not
# a digit inside a name (Llama-3.1-8B, H100, fp8, p99, W8A8), an id (arXiv:2309.06180), an
# address (127.0.0.1) or a version with three parts (2.13.0).
NUMBER = re.compile(r"(?<![\w.:/])\d[\d,]*(?:\.\d+)?(?:e-?\d+)?(?=[x×%]?(?!\w))")


def numbers(text: str) -> list[tuple[int, str]]:
    """(offset, plain form) of every number written in `text`."""
    found = []
    text = text.replace("{,}", ",\0\0")  # TeX's thousands separator, offsets kept
    for m in NUMBER.finditer(text):
        token, start = m.group().rstrip(","), m.start()
        if re.search(r"[A-Za-z]\w*(?:-\d+)*-$", text[max(0, start - 40) : start]):
            continue  # Llama-3, GPT-4, CVE-2025-46570: part of a name (2-4x is a range)
        if re.match(r"[.:/]\w", text[m.end() : m.end() + 2]):
            continue  # a version, an id, a path, a ratio written a/b
        if re.fullmatch(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|[^,]*", token):
            found.append((start, plain(token)))
        else:  # "1,2,4" is a list of numbers, not one
            offset = start
            for part in token.split(","):
                if part:
                    found.append((offset, plain(part)))
                offset += len(part) + 1
    return found


def plain(number: str) -> str:
    """A number's value, written one way: 1,638 and 1638 compare equal, so do 0.90 and 0.9."""
    x = float(number.replace(",", ""))
    return str(int(x)) if x.is_integer() and abs(x) < 1e15 else repr(x)
