"""Run a command while vLLM and llmserve-ref serve the tiny model; stop them after it.

    python tests/peers/with_servers.py pytest tests/peers \
        docs/stage-9/running-a-serving-engine.md

This is what `nox -s engines` runs. Both servers start once, with the flags of the launch
commands on the page (`servers.knobs`): vLLM's CPU build in float32 on a copy of the model,
and ``llmserve-ref serve --compile``; then the same two with prompt lookup (``--speculative-config``
with `servers.NGRAM`), and the same two with the draft model (`servers.DRAFT`, a copy of
the package's draft beside the model's), which the speculative-decoding page measures
against the first two; and ours once more without ``--compile`` (eager), which the
serving-engine page measures the compiled one against; and llama.cpp's llama-server. They
start in two lines, side by side (`start_side_by_side`). The command then runs with the
environment that says where they are (`servers.page_env`):

    VLLM_BASE_URL, LLMSERVE_BASE_URL   the servers' OpenAI base URLs (http://127.0.0.1:PORT/v1)
    VLLM_LOG, LLMSERVE_LOG             their logs, which hold the startup lines
    VLLM_NGRAM_BASE_URL, VLLM_NGRAM_LOG, LLMSERVE_NGRAM_BASE_URL, LLMSERVE_NGRAM_LOG
    VLLM_DRAFT_BASE_URL, VLLM_DRAFT_LOG, LLMSERVE_DRAFT_BASE_URL, LLMSERVE_DRAFT_LOG
                                       the same for the four that speculate
    LLMSERVE_EAGER_BASE_URL, LLMSERVE_EAGER_LOG
                                       the same for ours without --compile
    LLAMA_CPP_BASE_URL, LLAMA_CPP_LOG  the same for llama.cpp's llama-server on our GGUF
                                       export, where $LLAMA_SERVER names the binary (the
                                       engines session builds it)
    LLMSERVE_ENGINES=1                 the page's vLLM blocks run instead of skipping

The page reads the same variables, with a reader's defaults (ports 8000 and 8001), and
tests/peers/conftest.py hands these servers to the tests instead of starting its own.
Exits with the command's status; a server that does not start is a failure.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import servers  # this file runs as a script, beside servers.py

from llmserve_ref.model.weights import DRAFT_DIR


def start_side_by_side(
    up: contextlib.ExitStack, *chains: list[contextlib.AbstractContextManager]
) -> list[servers.Server]:
    """Each chain's servers started one after another, the chains side by side: while our
    first server compiles, with a core to spare, the other engines start. Every server
    that started stops with `up`, also when another failed to start."""

    def start(chain: list[contextlib.AbstractContextManager]) -> list[servers.Server]:
        started = []
        for server in chain:
            started.append(server.__enter__())
            up.push(server.__exit__)  # a deque's append: safe from two threads
        return started

    with concurrent.futures.ThreadPoolExecutor(len(chains)) as pool:
        done = [pool.submit(start, chain) for chain in chains]
    return [server for chain in done for server in chain.result()]


def main(command: list[str]) -> int:
    if not command:
        sys.exit(__doc__)
    with contextlib.ExitStack() as up:
        root = Path(up.enter_context(tempfile.TemporaryDirectory(prefix="llmserve-engines-")))
        # A copy of the model, so that nothing vLLM writes lands in the package.
        model_dir = Path(shutil.copytree(servers.MODEL_DIR, root / "tiny"))
        shutil.copytree(DRAFT_DIR, root / servers.DRAFT["model"])  # ./tiny-draft, from root
        started = time.monotonic()
        sizes = {
            "kv_cache_memory_bytes": servers.KV_CACHE_MEMORY_BYTES,
            "block_size": servers.BLOCK_SIZE,
        }
        vllm = [
            servers.vllm_server(model_dir, root, speculative_config=config, **sizes)
            for config in (None, *servers.GUESSING.values())  # plain, then the pairs that guess
        ]
        ours, ngram, draft = (
            servers.our_server(root, speculative_config=config, **sizes)
            for config in (None, servers.NGRAM, servers.DRAFT)
        )
        eager = servers.our_server(root, compile=False, **sizes)  # ours before it compiled
        # Two lines of starts, about as long: ours first, compiling its decode step (four
        # minutes cold on two cores), then the one with prompt lookup, which finds the same
        # graphs in torch's compile cache (seconds, where beside it both would compile);
        # vLLM's three, then ours with the draft model (its cache's blocks are fewer, so
        # its graphs are others: another compile).
        first = [ours, ngram, eager]
        if servers.HAVE_LLAMA_CPP:  # the engines session builds it; its tests skip without
            first.append(servers.llama_cpp_server(model_dir, root))
        running = start_side_by_side(up, first, [*vllm, draft])
        for server in running:
            print(
                f"{server.name} ready after {server.ready_after:.0f} s at {server.base_url}: "
                f"{' '.join(server.command)}",
                flush=True,
            )
        print(f"servers up after {time.monotonic() - started:.0f} s", flush=True)
        # vLLM's environment (offline, no usage stats): vLLM's client runs in the command.
        env = {**servers.vllm_env(), **servers.page_env(*running)}
        return subprocess.run(command, env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
