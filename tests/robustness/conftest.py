"""Robustness tests against a live server: a Schemathesis fuzz and a soak (`nox -s robustness`).

They take minutes and the fuzz needs Schemathesis, which only that session installs, so the
folder is collected only where ``LLMSERVE_ROBUSTNESS=1`` (the session sets it): ``nox -s
tests``, which collects ``tests/``, leaves it out.
"""

from __future__ import annotations

import os

import pytest

from llmserve_ref.serving.launcher import RunningServer, serve_in_thread

if os.environ.get("LLMSERVE_ROBUSTNESS") != "1":
    collect_ignore_glob = ["test_*.py"]


@pytest.fixture(scope="module")
def server() -> RunningServer:
    """A fresh server for each module: what one module leaves behind, the next does not see."""
    with serve_in_thread("tiny") as running:
        yield running
