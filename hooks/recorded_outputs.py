"""MkDocs hook and store: what each code block printed when the suite ran it, shown under it.

The test suite runs every ```python and ```pycon block of every page (tests/pages.py).
With ``--record-outputs`` it also keeps what each block printed: a python block's
standard output, and for a pycon block the whole session as it really ran, every actual
value where the page's expected output says ``...``. Recordings live in the repository,
under `recordings/` (one JSON file per page), so a fresh clone shows them; each is
labelled with the device it ran on, the machine, torch's version and the date.

A recording is keyed on the block as the reader sees it (its includes resolved) and on a
hash of the package's files: when either changes, the recording is stale. The suite
checks, for the device it runs on, that every block that prints has a current recording
and fails otherwise, naming the command that records them again. Nothing rewrites the
recordings unless asked to. This hook shows the current recordings of every device under
their block (tabs when there are several) and, for a recording that is stale, says that
it was left out.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import platform
import re
from dataclasses import dataclass
from pathlib import Path

from package_values import substitute
from snippets_resolver import resolve_includes

# The package's content hash has one home, the package (its version carries it too); the
# recordings are keyed on it for the package the blocks import: this tree's, installed
# editable or put on the path.
from llmserve_ref import package_hash

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
RECORDINGS = ROOT / "recordings"
REFRESH = "nox -s \"tests(device='{device}')\" -- --record-outputs"

# A Python fence as Sybil collects it (tests/pages.py), with its indentation and language.
FENCE = re.compile(
    r"^(?P<indent>[ \t]*)(?P<fence>`{3,})(?P<language>python|pycon)\b[^\n]*\n"
    r"(?P<body>.*?)^(?P=indent)(?P=fence)[ \t]*$",
    re.MULTILINE | re.DOTALL,
)


def key_of(block_source: str, package: str) -> str:
    """The key of a recording: the block as the reader sees it, and the package it ran."""
    return hashlib.sha256(f"{package}\n{block_source}".encode()).hexdigest()[:16]


def machine() -> str:
    """The machine a recording comes from, in a few words."""
    import torch  # only the suite records; the build never imports torch here

    device = os.environ.get("LLMSERVE_DEVICE", "cpu")
    if device == "cuda" and torch.cuda.is_available():
        chip = torch.cuda.get_device_name(0)
    elif device == "mps":
        chip = f"Apple {platform.machine()} ({platform.mac_ver()[0] or 'macOS'})"
    else:
        chip = _cpu_model()
    return f"{chip}, {os.cpu_count()} cores, torch {torch.__version__}"


def _cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return " ".join(line.split(":", 1)[1].split())
    return platform.processor() or platform.machine()


@dataclass
class Run:
    """One device's recording of one block."""

    key: str
    output: str
    machine: str
    date: str

    @classmethod
    def now(cls, key: str, output: str) -> Run:
        return cls(key, output, machine(), datetime.date.today().isoformat())


def is_a_page(path: Path) -> bool:
    """Whether `path` is one of the site's pages (test suites also run throwaway ones)."""
    return path.resolve().is_relative_to(DOCS.resolve())


def store_path(page: Path) -> Path:
    """Where the recordings of `page` (a file under docs/) are kept."""
    return RECORDINGS / page.resolve().relative_to(DOCS.resolve()).with_suffix(".json")


def load(page: Path) -> dict[int, dict[str, Run]]:
    """Block index -> device -> its recording."""
    path = store_path(page)
    if not path.exists():
        return {}
    blocks = json.loads(path.read_text(encoding="utf-8"))["blocks"]
    return {int(i): {d: Run(**r) for d, r in runs.items()} for i, runs in blocks.items()}


def save(page: Path, recordings: dict[int, dict[str, Run]]) -> None:
    path = store_path(page)
    blocks = {
        str(i): {d: vars(r) for d, r in sorted(runs.items())}
        for i, runs in sorted(recordings.items())
        if runs
    }
    if not blocks:
        path.unlink(missing_ok=True)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"blocks": blocks}, indent=1, ensure_ascii=False) + "\n"
    path.write_text(text, encoding="utf-8")


def panel(runs: dict[str, Run], indent: str) -> str:
    """The Markdown of an output panel: one tab per device when there are several."""

    def code(text: str, pad: str) -> str:
        fence = "`" * max(3, 1 + max((len(m) for m in re.findall(r"`+", text)), default=0))
        body = "".join(f"{pad}{line}\n" if line else "\n" for line in text.splitlines())
        return f"{pad}{fence}text\n{body}{pad}{fence}\n"

    inner = indent + "    "
    if len(runs) == 1:
        ((device, run),) = runs.items()
        title = f"Output ({device}: {run.machine}, {run.date})"
        return f'\n{indent}!!! output "{title}"\n\n{code(run.output, inner)}'
    tabs = "".join(
        f'\n{inner}=== "{device}"\n\n{inner}    {run.machine}, {run.date}\n\n'
        f"{code(run.output, inner + '    ')}"
        for device, run in sorted(runs.items())
    )
    return f'\n{indent}!!! output "Output"\n{tabs}'


def shows_it_all(block: re.Match, runs: dict[str, Run]) -> bool:
    """A pycon block whose every output is on the page as it ran needs no panel.

    Whitespace aside, as the doctest compares (a long repr may be wrapped on the page).
    """

    shown = dedent(block["body"], block["indent"]).split()
    return block["language"] == "pycon" and all(r.output.split() == shown for r in runs.values())


def left_out(devices: list[str], indent: str) -> str:
    which = ", ".join(devices)
    return (
        f'\n{indent}!!! output-stale "Output left out"\n\n'
        f"{indent}    The output recorded on {which} came from an older version of this block "
        f"or of the package, so it is not shown. `{REFRESH.format(device=devices[0])}` "
        f"records it again.\n"
    )


def with_outputs(
    markdown: str, resolved: str, recordings: dict[int, dict[str, Run]], package: str
) -> str:
    """`markdown` with each block's current recordings inserted under it.

    `resolved` is the same page with its includes resolved: the blocks are matched by
    their order (an include never adds or removes a Python fence), and keyed on the
    resolved text, which is what ran.
    """
    raw, ran = list(FENCE.finditer(markdown)), list(FENCE.finditer(resolved))
    if len(raw) != len(ran):
        raise ValueError(f"{len(raw)} Python fences in the page, {len(ran)} once resolved")
    out, last = [], 0
    for index, (fence, block) in enumerate(zip(raw, ran, strict=True)):
        runs = recordings.get(index, {})
        key = key_of(dedent(block["body"], block["indent"]), package)
        current = {d: r for d, r in runs.items() if r.key == key}
        stale = sorted(d for d, r in runs.items() if r.key != key)
        out.append(markdown[last : fence.end()] + "\n")
        if current and not shows_it_all(block, current):
            out.append(panel(current, fence["indent"]))
        if stale:
            out.append(left_out(stale, fence["indent"]))
        last = fence.end() + 1
    return "".join(out) + markdown[last:]


def current_output(page: Path, device: str, marker: str) -> str | None:
    """What the block of `page` whose recording on `device` contains `marker` printed, if
    that recording is current: how a figure draws a measurement the page printed. None when
    no block's recording has it, or when it is stale (the block or the package changed since
    it ran), so that a figure never shows what the page would leave out."""
    resolved = resolve_includes(substitute(page.read_text(encoding="utf-8")))
    recordings = load(page)
    for index, block in enumerate(FENCE.finditer(resolved)):
        run = recordings.get(index, {}).get(device)
        if run is not None and marker in run.output:
            key = key_of(dedent(block["body"], block["indent"]), _package())
            return run.output if run.key == key else None
    return None


def dedent(body: str, indent: str) -> str:
    """A fence's content without the fence's own indentation (as Sybil evaluates it)."""
    return "".join(
        line[len(indent) :] if line.startswith(indent) else line.lstrip(" \t")
        for line in body.splitlines(keepends=True)
    )


# MkDocs hook


def on_page_markdown(markdown: str, page, config, files) -> str:
    source = Path(page.file.abs_src_path)
    if source.suffix != ".md":
        return markdown
    recordings = load(source)
    if not recordings:
        return markdown
    return with_outputs(markdown, resolve_includes(markdown), recordings, _package())


_PACKAGE_HASH: list[str] = []


def _package() -> str:
    if not _PACKAGE_HASH:  # once per build (or per rebuild under `mkdocs serve`)
        _PACKAGE_HASH.append(package_hash())
    return _PACKAGE_HASH[0]


def on_pre_build(config) -> None:
    _PACKAGE_HASH.clear()
