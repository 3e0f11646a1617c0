"""The page's calculator (JavaScript) computes exactly what `planning.kv_math` computes.

The JS core runs under Node on the catalog the site ships (`catalog_as_json()`), for
every catalog model over a grid of contexts, batches, precisions, GPUs and tensor
parallel sizes, and every byte count and sequence count must equal the Python one.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import replace
from pathlib import Path

from package_values import substitute

from conftest import NEEDS_NODE, run_node
from llmserve_ref.planning.kv_math import (
    DTYPE_BITS,
    KVFormat,
    format_bytes,
    kv_bytes_per_batch,
    kv_bytes_per_sequence,
    kv_bytes_per_token,
    kv_cache_budget,
    max_kv_tokens,
    sequences_that_fit,
    weight_bytes,
)
from llmserve_ref.planning.model_catalog import MODELS, catalog_as_json, config_as_dict, model
from llmserve_ref.planning.model_shape import ModelShape
from llmserve_ref.planning.published import VLLM

ROOT = Path(__file__).resolve().parents[2]
CALCULATOR = ROOT / "docs" / "javascripts" / "kv-calculator.js"

pytestmark = NEEDS_NODE

# Reads cases from stdin, evaluates each with the calculator's core, prints results as JSON.
RUNNER = r"""
const core = require(process.argv[1]);
const cases = JSON.parse(require("fs").readFileSync(0, "utf8"));
const results = cases.map((c) => {
  try {
    if (c.format !== undefined) return { text: core.formatBytes(c.format) };
    const opts = { tensorParallel: c.tp, groupSize: c.group, scaleBytes: c.scale_bytes };
    const weights = core.weightBytes(c.params, c.weight_bits);
    const budget = core.kvCacheBudget(c.memory, weights,
      { tensorParallel: c.tp, gpuMemoryUtilization: c.util });
    return {
      token: core.kvBytesPerToken(c.cfg, c.bits, opts),
      sequence: core.kvBytesPerSequence(c.cfg, c.context, c.bits, opts),
      batch: core.kvBytesPerBatch(c.cfg, c.context, c.batch, c.bits, opts),
      weights, budget,
      tokens: core.maxKvTokens(c.cfg, budget, c.bits, opts),
      fit: core.sequencesThatFit(c.cfg, c.context, budget, c.bits, opts),
    };
  } catch (error) {
    return { error: error.message };
  }
});
process.stdout.write(JSON.stringify(results));
"""


def run_js(cases: list[dict]) -> list[dict]:
    return run_node(RUNNER, CALCULATOR, cases, timeout=120)


def case(
    cfg: ModelShape,
    params: int,
    *,
    context: int,
    batch: int,
    dtype: str,
    memory: int,
    tp: int = 1,
    util: float = VLLM.gpu_memory_utilization,
    weight_dtype: str = "bf16",
    group: int | None = None,
    scale_bytes: int = 4,
) -> tuple[dict, dict]:
    """A case for Node, and what Python computes for it."""
    fmt = KVFormat(dtype, group, scale_bytes)
    js = {
        "cfg": config_as_dict(cfg),
        "params": params,
        "context": context,
        "batch": batch,
        "bits": DTYPE_BITS[dtype],
        "weight_bits": DTYPE_BITS[weight_dtype],
        "memory": memory,
        "tp": tp,
        "util": util,
        "group": group,
        "scale_bytes": scale_bytes,
    }
    weights = weight_bytes(params, weight_dtype)
    budget = kv_cache_budget(memory, weights, tensor_parallel=tp, gpu_memory_utilization=util)
    tp_ = {"tensor_parallel": tp}
    expected = {
        "token": kv_bytes_per_token(cfg, fmt, **tp_),
        "sequence": kv_bytes_per_sequence(cfg, context, fmt, **tp_),
        "batch": kv_bytes_per_batch(cfg, context, batch, fmt, **tp_),
        "weights": weights,
        "budget": budget,
        "tokens": max_kv_tokens(cfg, budget, fmt, **tp_),
        "fit": sequences_that_fit(cfg, context, budget, fmt, **tp_),
    }
    return js, expected


def grid() -> list[tuple[dict, dict]]:
    catalog = json.loads(catalog_as_json())  # the data the site ships to the calculator
    cases = []
    utilizations = (VLLM.gpu_memory_utilization, 0.95)
    for entry in catalog["models"]:
        cfg = model(entry["name"]).config
        contexts = [c for c in (1, 1000, 8192, 32768, 131072) if c <= cfg.max_position_embeddings]
        tps = [tp for tp in (1, 2, 8) if cfg.num_attention_heads % tp == 0]
        for context, batch, dtype, gpu, tp, util in itertools.product(
            contexts, (1, 7, 64), catalog["dtype_bits"], catalog["gpus"], tps, utilizations
        ):
            cases.append(
                case(
                    cfg,
                    entry["num_parameters"],
                    context=context,
                    batch=batch,
                    dtype=dtype,
                    memory=gpu["memory_bytes"],
                    tp=tp,
                    util=util,
                    weight_dtype=("bf16", "fp8")[tp == 8],
                )
            )
        for dtype, group in itertools.product(("int4", "int8", "fp8"), (32, 64)):
            cases.append(
                case(
                    cfg,
                    entry["num_parameters"],
                    context=4096,
                    batch=16,
                    dtype=dtype,
                    memory=80 * 2**30,
                    group=group,
                    weight_dtype="int4",
                )
            )
    return cases


def test_calculator_agrees_with_python_on_every_catalog_model():
    cases = grid()
    assert len(cases) > 10_000
    results = run_js([js for js, _ in cases])
    mismatches = [
        (js, expected, got)
        for (js, expected), got in zip(cases, results, strict=True)
        if got != expected
    ]
    assert not mismatches, f"{len(mismatches)} mismatches, first: {mismatches[0]}"


def test_calculator_does_not_multiply_by_query_heads():
    """The classic calculator bug: 2 × layers × *query* heads × head dim × bytes for GQA."""
    llama70 = model("Llama-3.1-70B")
    cfg = llama70.config
    cases = [
        case(
            c, llama70.num_parameters, context=8192, batch=1, dtype="bf16", memory=80 * 2**30, tp=8
        )
        for c in (cfg, replace(cfg, num_attention_heads=8))
    ]
    results = run_js([js for js, _ in cases])
    assert results[0]["token"] == 2 * 80 * 8 * 128 * 2 // 8  # 8 KV heads over 8 GPUs
    assert results[0]["token"] == results[1]["token"]
    assert results[0] == cases[0][1]


def test_calculator_rejects_what_python_rejects():
    cfg = config_as_dict(model("Llama-3.1-8B").config)
    base = {
        "params": 8_030_261_248,
        "context": 8192,
        "batch": 1,
        "bits": 16,
        "weight_bits": 16,
        "memory": 80 * 2**30,
        "tp": 1,
        "util": 0.9,
        "group": None,
        "scale_bytes": 4,
    }
    bad = [
        {**base, "cfg": {**cfg, "num_kv_heads": 3}},
        {**base, "cfg": cfg, "context": 131073},
        {**base, "cfg": cfg, "context": -1},
        {**base, "cfg": cfg, "batch": -1},
        {**base, "cfg": cfg, "tp": 3},
        {**base, "cfg": cfg, "util": 1.5},
        {**base, "cfg": cfg, "group": 48},
        {**base, "cfg": {**cfg, "num_layers": 0}},
    ]
    for result in run_js(bad):
        assert set(result) == {"error"}, result


def test_calculator_formats_bytes_like_python():
    values = [0, 1, 1023, 1024, 1152, 70272, 131072, 1536 * 2**20, 61_248_888_832, 2**40 + 1]
    results = run_js([{"format": v} for v in values])
    assert [r["text"] for r in results] == [format_bytes(v) for v in values]


def test_every_catalog_model_reaches_the_calculator():
    shipped = {m["name"] for m in json.loads(catalog_as_json())["models"]}
    assert shipped == {m.name for m in MODELS}


def test_the_calculator_starts_at_vllms_default_utilization():
    """One constant: the package's default, the JSON the calculator loads, the page's input."""
    assert json.loads(catalog_as_json())["gpu_memory_utilization"] == VLLM.gpu_memory_utilization
    page = substitute((ROOT / "docs" / "stage-4" / "kv-cache-size-math.md").read_text())
    field = re.search(r'<input id="kv-util"[^>]*value="(?P<value>[^"]+)"', page)
    assert field and float(field["value"]) == VLLM.gpu_memory_utilization
    assert "data.gpu_memory_utilization" in CALCULATOR.read_text()
