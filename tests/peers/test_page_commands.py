"""The page's launch commands are the ones `nox -s engines` runs.

docs/stage-9/running-a-serving-engine.md tells a reader how to start vLLM and our server,
and the engines session starts them itself (`servers.vllm_command`, `servers.our_command`);
the page's blocks then run against those servers. So the flags must not drift apart: the
page's two console commands, and its `KNOBS` list, are checked here against the session's
commands, up to what differs on purpose (the model's path, the port, the interpreter, the
``| tee`` of the log). So are the speculative-decoding page's two launches with prompt lookup
(their ``--speculative-config`` included), against the second pair the session starts, and
its llama-server launch against `servers.llama_cpp_command`; and run-a-model-locally's lines
that build llama-server, against the noxfile's. Nothing here needs vLLM: this runs in
`nox -s tests` too.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
from pathlib import Path

import pytest

from . import servers

PAGE = servers.ROOT / "docs" / "stage-9" / "running-a-serving-engine.md"
SPECULATIVE_PAGE = servers.ROOT / "docs" / "stage-6" / "speculative-decoding.md"


def console_commands(page: Path = PAGE, first: str = "") -> list[list[str]]:
    """Every `$ ...` command of the page's console blocks, continuation lines joined (those
    whose first word is `first`, if given)."""
    blocks = re.findall(r"^```console\n(.*?)^```", page.read_text(encoding="utf-8"), re.M | re.S)
    text = "\n".join(blocks).replace("\\\n", " ")
    lines = [line[2:] for line in text.splitlines() if line.startswith(f"$ {first}")]
    return [shlex.split(line) for line in lines]


def launch(words: list[str]) -> list[str]:
    """A launch command's arguments, without the log's tee or the values that may differ
    (paths, ports, and llama.cpp's threads: one per core of the machine)."""
    words = words[: words.index("2>&1")] if "2>&1" in words else words
    out, skip = [], False
    for word in words:
        if skip:
            out.append("VALUE")
            skip = False
        else:
            out.append(word)
            skip = word in ("--model", "--port", "--threads", "--threads-batch")
    return out


def the_command(start: list[str], page: Path = PAGE, config: dict | None = None) -> list[str]:
    """The page's one command that starts with `start` (and launches with `config`)."""
    found = [
        c
        for c in console_commands(page, start[0])
        if c[: len(start)] == start and (config is None or json.dumps(config) in c)
    ]
    assert len(found) == 1, f"the page should have one command starting {' '.join(start)}"
    return found[0]


LAUNCHES = [(PAGE, None), *((SPECULATIVE_PAGE, c) for c in servers.GUESSING.values())]


@pytest.mark.parametrize(("page", "config"), LAUNCHES)
def test_vllm_launch_matches_the_session(page, config):
    command = the_command(["VLLM_TARGET_DEVICE=cpu", "python", "-m"], page, config)
    session = servers.vllm_command(
        Path("tiny"), 8000, servers.BLOCK_SIZE, servers.KV_CACHE_MEMORY_BYTES, config
    )
    assert servers.vllm_env()["VLLM_TARGET_DEVICE"] == "cpu"  # the page sets it on the line
    assert launch(command[2:]) == launch(session[1:])  # from `-m`, past the interpreter


@pytest.mark.parametrize(("page", "config"), LAUNCHES)
def test_our_launch_matches_the_session(page, config):
    command = the_command(["llmserve-ref", "serve"], page, config)
    sizes = servers.BLOCK_SIZE, servers.KV_CACHE_MEMORY_BYTES
    session = servers.our_command(8001, *sizes, config)
    # The session names the model (the default, tiny) and runs the module; the page, the command.
    session = ["llmserve-ref", *session[session.index("serve") :]]
    session = session[:2] + session[4:]  # without `--model tiny`
    assert launch(command) == launch(session)


def test_the_pages_knobs_are_the_launch_knobs():
    match = re.search(r"^KNOBS = (\[.*?\])$", PAGE.read_text(encoding="utf-8"), re.M | re.S)
    assert match, "the page defines KNOBS in its first block"
    knobs = ast.literal_eval(match[1])
    assert knobs == servers.knobs(servers.BLOCK_SIZE, servers.KV_CACHE_MEMORY_BYTES)


@pytest.mark.parametrize("command", ["vllm", "ours"])
def test_both_launches_get_the_same_knobs(command):
    sizes = servers.BLOCK_SIZE, servers.KV_CACHE_MEMORY_BYTES
    session = {
        "vllm": servers.vllm_command(Path("m"), 1, *sizes),
        "ours": servers.our_command(1, *sizes),
    }[command]
    knobs = servers.knobs(*sizes)
    assert session[-len(knobs) :] == knobs


def test_llama_cpps_launch_matches_the_session():
    command = the_command(["build/bin/llama-server"])
    session = servers.llama_cpp_command(Path("llama-server"), Path("tiny.gguf"), 8080)
    assert launch(command[1:]) == launch(session[1:])
    threads = command[command.index("--threads") + 1]
    assert threads == command[command.index("--threads-batch") + 1] == "1"  # 2 cores, less 1


def test_the_llama_cpp_build_is_the_sessions():
    """run-a-model-locally's CMake lines build llama-server as `nox -s engines` does."""
    noxfile = ast.parse((servers.ROOT / "noxfile.py").read_text(encoding="utf-8"))
    pinned = {
        target.id: ast.literal_eval(node.value)
        for node in noxfile.body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name) and target.id in ("LLAMA_CPP", "LLAMA_CPP_CMAKE")
    }
    page = servers.ROOT / "docs" / "stage-3" / "run-a-model-locally.md"
    version = pinned["LLAMA_CPP"].split("==")[1]
    download = the_command(["python", "-m", "pip", "download"], page)
    assert download[-1] == pinned["LLAMA_CPP"]
    configure = the_command(["cmake", "-S"], page)
    assert configure[2] == f"llama_cpp_python-{version}/vendor/llama.cpp"
    assert configure[5:] == pinned["LLAMA_CPP_CMAKE"]
    assert the_command(["cmake", "--build"], page)[2:5] == ["build", "--target", "llama-server"]
