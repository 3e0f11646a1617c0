"""The ``llmserve-ref`` command: importing it is cheap, as its docstring says."""

from __future__ import annotations

import subprocess
import sys

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
