"""The reader's clients, Python and TypeScript, streaming from our server as they would from
Ollama or llama.cpp: only `OPENAI_BASE_URL` changes.

The TypeScript client needs its node_modules (``npm ci --prefix clients/ts``). Without them
the test skips, unless ``LLMSERVE_REQUIRE_NODE=1`` (set in CI) makes that a failure.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYTHON_CLIENT = ROOT / "snippets" / "run-a-model-locally" / "chat.py"
TS_CLIENT = ROOT / "clients" / "ts"


def run_client(command: list[str], cwd: Path, base_url: str) -> str:
    env = {**os.environ, "OPENAI_BASE_URL": base_url, "MODEL": "tiny"}
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


def check_story(output: str) -> None:
    # The clients sample without a seed, as a reader's would: check the shape, not the words.
    story = output.split("\n[", 1)[0]
    assert len(story.split()) >= 10, output
    assert "\ufffd" not in output


def test_the_python_client_streams_a_story_and_its_usage(server):
    output = run_client([sys.executable, PYTHON_CLIENT.name], PYTHON_CLIENT.parent, server.base_url)
    check_story(output)
    assert re.search(r"\n\[usage\] 10 prompt tokens, \d+ completion tokens\n$", output)


def test_the_typescript_client_streams_and_reads_the_timings(server):
    if not (TS_CLIENT / "node_modules" / "openai").is_dir() or shutil.which("npx") is None:
        reason = "clients/ts/node_modules is missing: run `npm ci --prefix clients/ts`"
        if os.environ.get("LLMSERVE_REQUIRE_NODE") == "1":
            pytest.fail(f"{reason} (LLMSERVE_REQUIRE_NODE=1 asks for this test)")
        pytest.skip(reason)
    output = run_client(["npx", "--no-install", "tsx", "chat.ts"], TS_CLIENT, server.base_url)
    check_story(output)
    assert re.search(r"\[client\] first token after \d+ ms, whole reply after \d+ ms", output)
    assert re.search(r"\[usage\] 10 prompt tokens, \d+ completion tokens", output)
    timings = re.search(
        r"\[timings\] prompt: 10 tokens, \d+ tokens/s; generation: (\d+) tokens", output
    )
    assert timings and int(timings[1]) > 0
