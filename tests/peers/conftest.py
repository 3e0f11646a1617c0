"""Real vLLM beside our server: the fixtures of `nox -s engines`.

Only that session installs vLLM (its CPU build, which pins its own torch), so every test
module here skips itself where vLLM is missing: one visible skip per module elsewhere.

Both servers start once for the whole folder and stop at its end, with the same flags
(see `servers`). They are idle while the other one is measured. Under
`with_servers.py` (what `nox -s engines` runs) they are already up, started around the
whole run so that the page shares them, and the fixtures hand those over instead.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from llmserve_ref.model.generate import generate
from llmserve_ref.model.sampling import SamplingParams
from llmserve_ref.model.weights import load_target

from . import servers


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the tiny target model, so that nothing vLLM writes lands in the package."""
    return Path(shutil.copytree(servers.MODEL_DIR, tmp_path_factory.mktemp("model") / "tiny"))


@pytest.fixture(scope="session")
def vllm(model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """vLLM's OpenAI server (CPU build, float32) on the tiny model."""
    if server := servers.running("vLLM"):
        yield server
        return
    with servers.vllm_server(
        model_dir,
        tmp_path_factory.mktemp("vllm"),
        kv_cache_memory_bytes=servers.KV_CACHE_MEMORY_BYTES,
        block_size=servers.BLOCK_SIZE,
    ) as server:
        print(f"\nvLLM ready after {server.ready_after:.0f} s: {' '.join(server.command)}")
        yield server


@pytest.fixture(scope="session")
def ours(tmp_path_factory: pytest.TempPathFactory):
    """``llmserve-ref serve`` (the batched engine) on the tiny model, with vLLM's flags."""
    if server := servers.running("llmserve-ref"):
        yield server
        return
    with servers.our_server(
        tmp_path_factory.mktemp("ours"),
        kv_cache_memory_bytes=servers.KV_CACHE_MEMORY_BYTES,
        block_size=servers.BLOCK_SIZE,
    ) as server:
        print(f"\nllmserve-ref ready after {server.ready_after:.1f} s: {' '.join(server.command)}")
        yield server


@pytest.fixture(scope="session")
def llama_cpp(model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """llama.cpp's `llama-server` on our GGUF export of the tiny model."""
    if server := servers.running("llama.cpp"):
        yield server
        return
    with servers.llama_cpp_server(model_dir, tmp_path_factory.mktemp("llama_cpp")) as server:
        print(f"\nllama.cpp ready after {server.ready_after:.1f} s: {' '.join(server.command)}")
        yield server


@pytest.fixture(scope="session")
def greedy() -> Callable[[list[int], int], list[int]]:
    """Our model's greedy continuation of some prompt ids, up to a number of tokens or its
    <|eos|>, computed in this process on the CPU in float32: what every server must send."""
    model, tokenizer = load_target("cpu")

    def continuation(prompt_ids: list[int], max_tokens: int) -> list[int]:
        params = SamplingParams(temperature=0)
        eos = {tokenizer.eos_id}
        return list(generate(model, prompt_ids, params, max_tokens, eos))

    return continuation
