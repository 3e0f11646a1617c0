"""Every script in snippets/ runs as a reader would run it, and prints what its transcript says.

Each `snippets/<slug>/<name>.py` has a transcript `<name>.txt` beside it: the first line is
the command as typed in the snippet's folder (`$ python <name>.py [args]`), the rest the
output it prints (doctest-style `...` matches anything). The script runs in a fresh
interpreter, in its folder, with `LLMSERVE_DEVICE` set, so it can rely on nothing but the
installed package.
"""

from __future__ import annotations

import doctest
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

SNIPPETS = Path(__file__).resolve().parents[2] / "snippets"
SCRIPTS = sorted(SNIPPETS.glob("*/*.py"))


def transcript(script: Path) -> tuple[list[str], str]:
    """(argv after `python`, expected output) from the script's transcript."""
    path = script.with_suffix(".txt")
    assert path.is_file(), f"{script.name} has no transcript {path.name} beside it"
    command, _, expected = path.read_text(encoding="utf-8").partition("\n")
    argv = shlex.split(command.removeprefix("$ "))
    assert argv[:2] == ["python", script.name], (
        f"{path.name} must start with '$ python {script.name}'"
    )
    return argv[2:], expected


def reader_env() -> dict[str, str]:
    """The environment a reader's run gets: the suite's device, seeded hashes, no display."""
    return {
        **os.environ,
        "LLMSERVE_DEVICE": os.environ.get("LLMSERVE_DEVICE", "cpu"),
        "PYTHONHASHSEED": "0",
        "MPLBACKEND": "Agg",
    }


def check_prints_its_transcript(script: Path, python: str = sys.executable) -> None:
    """Run `script` with `python` in its folder, as its transcript says, and compare."""
    args, expected = transcript(script)
    result = subprocess.run(
        [python, script.name, *args],
        cwd=script.parent,
        env=reader_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    checker = doctest.OutputChecker()
    assert checker.check_output(expected, result.stdout, doctest.ELLIPSIS), (
        f"{script.name} printed:\n{result.stdout}\nbut its transcript says:\n{expected}"
    )


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.relative_to(SNIPPETS).as_posix())
def test_snippet_prints_its_transcript(script: Path):
    check_prints_its_transcript(script)


def test_every_snippet_folder_is_a_topic():
    sys.path.insert(0, str(SNIPPETS.parent / "hooks"))
    import curriculum

    slugs = {t.slug for t in curriculum.load().topics}
    for folder in SNIPPETS.iterdir():
        if folder.is_dir():
            assert folder.name in slugs, f"snippets/{folder.name} is not a topic slug"
