"""Freed memory kept: a prompt step of the tiny model without its page faults.

Each case runs in a fresh interpreter, since glibc's settings are the process's and
cannot be put back. The oracle is the kernel's own count of the process's minor page
faults (``getrusage``) over a few prompt steps, with glibc's defaults and after
`keep_freed_memory`.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
    reason="keep_freed_memory sets glibc's malloc; elsewhere it changes nothing",
)

# 16 prompts of 32 tokens, eagerly: the step 16 users' requests start with.
CHILD = """
import json, resource, sys
import torch
from llmserve_ref.engine.malloc_tuning import keep_freed_memory
from llmserve_ref.engine.model_runner import ModelRunner
from llmserve_ref.engine.paged_batch import Chunk
from llmserve_ref.model.weights import load_target

torch.set_num_threads(1)
kept = keep_freed_memory() if sys.argv[1] == "keep" else None
model = load_target("cpu")[0]
runner = ModelRunner(model, num_blocks=32, block_size=16)
chunks = [Chunk(list(range(2 + b, 34 + b)), 0, [2 * b, 2 * b + 1], True) for b in range(16)]
for _ in range(2):  # the heap grows to the step's size
    runner.forward(chunks)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(4):
    runner.forward(chunks)
faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 4
print(json.dumps({"kept": kept, "faults": faults}))
"""


def prompt_step_faults(mode: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, mode], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_a_prompt_step_page_faults_with_glibcs_defaults_and_not_once_memory_is_kept() -> None:
    default, kept = prompt_step_faults("default"), prompt_step_faults("keep")
    assert kept["kept"] is True  # glibc took both settings
    assert default["faults"] > 1000  # 4 KiB each: megabytes mapped again every step
    assert kept["faults"] < 100, default
