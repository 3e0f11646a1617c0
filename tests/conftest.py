"""Shared fixtures: the built site, and the device the suite runs on."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

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
    log: str


def wait_until(condition, timeout: float = 10.0) -> None:
    """Poll `condition` until it holds; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.fixture(scope="session")
def built_site(tmp_path_factory) -> Build:
    """The whole site, built once per test session, with what the build logged."""
    site = tmp_path_factory.mktemp("site")
    result = mkdocs_build(site)
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stderr[-4000:]}"
    return Build(site, result.stderr)


@pytest.fixture(scope="module")
def server():
    """Our server (the batched engine, the tiny model) on a free port, for one test module."""
    from llmserve_ref.serving.server import serve_in_thread

    with serve_in_thread("tiny") as running:
        yield running


@pytest.fixture(scope="module")
def client(server):
    """The official OpenAI client on `server`, without retries: a test sees every error."""
    from openai import OpenAI

    return OpenAI(base_url=server.base_url, api_key="none", max_retries=0)
