"""The ttft-tpot-throughput page's claim that batching turns users into throughput is checked
by its block, and the check can fail: with the one-at-a-time engine in the batched engine's
place, the same block fails its assertion (issue 19)."""

from __future__ import annotations

import pytest
from prose import DOCS, read

PAGE = DOCS / "stage-5" / "ttft-tpot-throughput.md"


@pytest.mark.slow
def test_the_batched_engines_block_fails_with_the_loop_engine_in_its_place():
    page = read(PAGE)
    (imports,) = page.block_with("from llmserve_ref.bench.bench_client import BenchConfig")
    (harness,) = page.block_with("def closed_loops(")
    (batched,) = page.block_with("batched = closed_loops(")
    assert "BatchedEngine.load(" in batched.source
    namespace: dict = {}
    exec(imports.source, namespace)
    exec(harness.source, namespace)
    substituted = batched.source.replace("BatchedEngine.load(", "LoopEngine.load(")
    with pytest.raises(AssertionError, match="8 users make only"):
        exec(substituted, namespace)
