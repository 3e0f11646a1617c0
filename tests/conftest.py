"""Shared fixtures: the built site, the server, and small random models."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

ROOT = Path(__file__).resolve().parent.parent


def mkdocs_build(site_dir: Path, config: Path = ROOT / "mkdocs.yml") -> subprocess.CompletedProcess:
    """`mkdocs build --strict` in a fresh interpreter, as CI and `nox -s docs` run it."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "-f",
            str(config),
            "-d",
            str(site_dir),
        ],
        cwd=config.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@dataclass
class Build:
    site: Path
    log: str | None  # None: built before the session (LLMSERVE_BUILT_SITE), log not kept


NODE = shutil.which("node")
NEEDS_NODE = pytest.mark.skipif(NODE is None, reason="Node.js is not installed (no `node` on PATH)")


def run_node(runner: str, module: Path, payload: object, timeout: float = 300) -> Any:
    """Run `runner` (JavaScript) under Node with `module`'s path as its argument and `payload`
    as JSON on stdin; return what it printed, read as JSON. How the site's scripts are tested
    against the Python they port."""
    result = subprocess.run(
        [NODE, "-e", runner, str(module)],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def wait_until(condition, timeout: float = 10.0) -> None:
    """Poll `condition` until it holds; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


# The shape of the small random Llamas tests build: big enough for GQA (4 query heads
# share 2 K/V heads) and two layers, small enough to run anywhere in milliseconds.
TINY_LLAMA = dict(
    vocab_size=64,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
)


@pytest.fixture
def tiny_llama():
    """`tiny_llama(**overrides)`: a random `Llama` of shape `TINY_LLAMA` with `overrides`
    (any `ModelConfig` field), its weights seeded by `seed`, in eval mode on `device`."""
    import torch

    from llmserve_ref.model.llama import Llama
    from llmserve_ref.model.llama_config import ModelConfig

    def make(*, seed: int = 0, device: str = "cpu", **overrides):
        torch.manual_seed(seed)
        return Llama(ModelConfig(**{**TINY_LLAMA, **overrides})).to(device).eval()

    return make


@pytest.fixture(scope="session")
def built_site(tmp_path_factory) -> Build:
    """The whole site, built once per test session, with what the build logged; or the site
    that LLMSERVE_BUILT_SITE names, which the session that sets it has just built with
    `mkdocs build --strict` (`nox -s site-audit`: one build of some 4 minutes, not two)."""
    if prebuilt := os.environ.get("LLMSERVE_BUILT_SITE"):
        return Build(Path(prebuilt), None)
    site = tmp_path_factory.mktemp("site")
    result = mkdocs_build(site)
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stderr[-4000:]}"
    return Build(site, result.stderr)


@pytest.fixture(scope="module")
def server():
    """Our server (the batched engine, the tiny model) on a free port, for one test module."""
    from llmserve_ref.serving.launcher import serve_in_thread

    with serve_in_thread("tiny") as running:
        yield running


@pytest.fixture(scope="module")
def client(server):
    """The official OpenAI client on `server`, without retries: a test sees every error."""
    from openai import OpenAI

    return OpenAI(base_url=server.base_url, api_key="none", max_retries=0)


JSON = {"content-type": "application/json"}


def post(server, body: dict | bytes, endpoint: str = "completions", **kwargs) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = kwargs.pop("headers", JSON)
    return httpx.post(
        f"{server.url}/v1/{endpoint}", content=content, headers=headers, timeout=30, **kwargs
    )


def error_of(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error
