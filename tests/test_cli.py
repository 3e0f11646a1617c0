"""The ``llmserve-ref`` command: importing it is cheap, as its docstring says; ``--version``
names the package's content; ``serve --help`` shows every default."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from llmserve_ref import cli

# Run in a fresh interpreter: this one has long since imported torch for other tests.
PROBE = """
import sys
import llmserve_ref.cli as cli
print(sorted(m for m in ("torch", "numpy", "uvicorn", "starlette", "httpx") if m in sys.modules))
cli.build_parser()
print(sorted(m for m in ("uvicorn", "starlette", "httpx") if m in sys.modules))
"""


def test_importing_the_cli_loads_no_torch_and_its_parser_no_server():
    result = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=True
    )
    after_import, after_parser = result.stdout.splitlines()
    assert after_import == "[]"
    assert after_parser == "[]"


def test_version_prints_the_release_and_the_packages_content_hash(capsys):
    import llmserve_ref

    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"llmserve-ref {llmserve_ref.__version__}\n"


def test_serve_help_shows_every_flags_default_but_not_the_api_key(capsys, monkeypatch):
    monkeypatch.setenv("LLMSERVE_API_KEY", "s3cret-from-env")
    with pytest.raises(SystemExit):
        cli.main(["serve", "--help"])
    text = capsys.readouterr().out
    options = text[text.index("options:") :]
    # One entry per flag: its line starts with two spaces and a dash; its help follows.
    entries = re.split(r"\n(?=  -)", options.split("\n", 1)[1])
    flags = {entry.split()[0].rstrip(","): " ".join(entry.split()) for entry in entries}
    assert {"--model", "--max-num-seqs", "--api-key", "--body-timeout"} <= set(flags)
    missing = [f for f, entry in flags.items() if f != "-h" and "(default:" not in entry]
    assert missing == []
    assert "(default: 2048)" in flags["--max-num-batched-tokens"]  # EngineConfig's
    assert "$LLMSERVE_API_KEY" in flags["--api-key"] and "s3cret" not in text
