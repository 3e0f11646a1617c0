"""What a page runs, in the order a reader meets it: its blocks, their examples, their skips.

The test suite runs a page with Sybil (tests/pages.py); the notebook built from the page
(hooks/notebooks.py) must run the same code in the same order and skip what the suite skips.
This module reads a page the way both see it, after the package's values are written in and
its includes are resolved:

- every ```python block is one example, every ```pycon block one example per `>>>` prompt;
- a `<!-- skip: next ... -->` directive skips the example that follows it, and a
  `skip: start ... -->` / `skip: end` pair the examples between them, as Sybil's skip parser
  does: with a quoted reason (or none) always, with `if(condition, reason="...")` only when
  the condition, evaluated in the page's namespace, holds;
- a ```python block whose only line includes a whole script with a command line
  (`--8<-- "snippets/x/run.py"`, ending in `if __name__ == "__main__":`) runs as the module
  `run`, not as its command line: that part stays out, and the names the script defines
  join the page's namespace.
"""

from __future__ import annotations

import ast
import doctest
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from package_values import substitute
from recorded_outputs import FENCE, dedent
from snippets_resolver import resolve_includes

SKIP = re.compile(r"<!--+\s*skip:\s*(?P<action>\w+)(?P<reason>[^\n]*?)\s*--+>")
# A block that includes one whole Python file (no section): a script, run as a module.
WHOLE_SCRIPT = re.compile(r"""\A\s*-+8<-+[ \t]+(?P<q>["'])(?P<path>[^"':\n]+\.py)(?P=q)\s*\Z""")
# ... whose command line is guarded, as every script under snippets/ is (CONTRIBUTING.md).
COMMAND_LINE = re.compile(r"""^if __name__ == (["'])__main__\1:""", re.MULTILINE)


@dataclass(frozen=True)
class Skip:
    """Why an example is skipped; with a `condition` (Python source), only when it holds."""

    reason: str
    condition: str | None = None


@dataclass(frozen=True)
class Example:
    """One thing the suite runs: a python block, or one `>>>` example of a pycon block."""

    block: int  # the block's place among the page's python and pycon blocks
    number: int  # the example's place in its block
    language: str  # "python" or "pycon"
    source: str  # the code, as it runs (a pycon example without its prompts)
    want: str = ""  # a pycon example's expected output, as the page shows it
    exc_msg: str | None = None  # the exception a pycon example expects, if any
    skip: Skip | None = None
    module: str | None = None  # the module name a whole script runs as


@dataclass
class Block:
    """A python or pycon fence of the resolved page, and what it runs."""

    index: int
    start: int  # offsets of the whole fence in the resolved page
    end: int
    indent: str
    language: str
    body: str  # its content, dedented as the suite runs it
    examples: list[Example] = field(default_factory=list)


def read_page(path: Path) -> tuple[str, str]:
    """The page as the build sees it, before and after its includes are resolved."""
    raw = substitute(path.read_text(encoding="utf-8"))
    return raw, resolve_includes(raw)


def parse_skip(arguments: str) -> Skip | None:
    """A skip directive's arguments as Sybil reads them: `"reason"` (or nothing) always
    skips; `if(condition, reason="...")` skips when the condition holds."""
    text = arguments.strip()
    if text.startswith("if"):
        call = ast.parse("if_" + text[2:], mode="eval").body
        assert isinstance(call, ast.Call) and call.args, f"malformed skip condition: {text!r}"
        condition = ast.get_source_segment("if_" + text[2:], call.args[0])
        reasons = [k.value for k in call.keywords if k.arg == "reason"] + call.args[1:]
        reason = ast.literal_eval(reasons[0]) if reasons else condition
        return Skip(str(reason), condition)
    return Skip(str(ast.literal_eval(text)) if text else "")


def modules(raw: str, resolved: str) -> dict[int, str]:
    """Block index -> the module it runs as, for each block that includes a whole script
    with a command line (`raw` is the page before its includes are resolved)."""
    raw_fences = list(FENCE.finditer(raw))
    fences = list(FENCE.finditer(resolved))
    if len(raw_fences) != len(fences):
        raise ValueError(f"{len(raw_fences)} Python fences in the page, {len(fences)} resolved")
    found = {}
    for index, (before, after) in enumerate(zip(raw_fences, fences, strict=True)):
        script = WHOLE_SCRIPT.match(dedent(before["body"], before["indent"]))
        if script and COMMAND_LINE.search(after["body"]):
            found[index] = Path(script["path"]).stem
    return found


def blocks_of(raw: str, resolved: str) -> list[Block]:
    """Every python and pycon block of a page, each with its examples and their skips."""
    scripts = modules(raw, resolved)
    events = sorted(
        [(m.start(), "skip", m) for m in SKIP.finditer(resolved)]
        + [(m.start(), "block", m) for m in FENCE.finditer(resolved)]
    )
    found: list[Block] = []
    region: Skip | None = None  # the skip of an open start/end region
    pending: Skip | None = None  # the skip a `next` directive holds for the next example
    for _, kind, match in events:
        if kind == "skip":
            skip = parse_skip(match["reason"])
            if match["action"] == "next":
                pending = skip
            elif match["action"] == "start":
                region = skip
            else:
                region = None
            continue
        body = dedent(match["body"], match["indent"])
        block = Block(
            len(found), match.start(), match.end(), match["indent"], match["language"], body
        )
        for example in _examples(block, scripts.get(block.index)):
            skip, pending = (pending or region), None
            block.examples.append(replace(example, skip=skip))
        found.append(block)
    return found


def _examples(block: Block, module: str | None) -> list[Example]:
    if block.language == "python":
        return [Example(block.index, 0, "python", block.body, module=module)]
    return [
        Example(block.index, n, "pycon", e.source, e.want, e.exc_msg)
        for n, e in enumerate(doctest.DocTestParser().get_examples(block.body))
    ]


def transcript(source: str, got: str, raised: bool = False) -> str:
    """One pycon example as it ran: its source at the prompts, then what it printed."""
    lines = source.rstrip("\n").split("\n")
    text = "".join(f"{'>>>' if i == 0 else '...'} {line}\n" for i, line in enumerate(lines))
    if raised:
        got = f"Traceback (most recent call last):\n...\n{got}"
    return text + got


def split_transcript(recorded: str, examples: list[Example]) -> list[str | None]:
    """What each example printed, from a pycon block's recording (`transcript`s joined);
    None for an example the recording does not hold (it was skipped when recorded)."""
    spans: list[tuple[int, int] | None] = []
    position = 0
    for example in examples:
        prompt = transcript(example.source, "")
        start = recorded.find(prompt, position)
        spans.append(None if start < 0 else (start, start + len(prompt)))
        position = position if start < 0 else start + len(prompt)
    found = [span for span in spans if span] + [(len(recorded), len(recorded))]
    return [None if s is None else recorded[s[1] : found[found.index(s) + 1][0]] for s in spans]


def page_blocks(path: Path) -> list[Block]:
    """`blocks_of` the page at `path`."""
    return blocks_of(*read_page(path))


def run_as_module(source: str, name: str, namespace: dict, filename: str = "<page>") -> None:
    """Run a whole script as the module `name` (its command line stays out), then give its
    names to the page's `namespace`, as IPython's `%run -n` does in the page's notebook."""
    module: dict = {"__name__": name}
    exec(compile(source, filename, "exec", dont_inherit=True), module)
    namespace.update({k: v for k, v in module.items() if not k.startswith("__")})
