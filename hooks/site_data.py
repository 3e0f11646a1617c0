"""MkDocs hook: data files the site's scripts read, generated from the package at build time.

The KV calculator (docs/javascripts/kv-calculator.js) reads the model and GPU catalog
from `javascripts/kv-catalog.json`, written here from `llmserve_ref.planning.model_catalog`, so the
page's calculator and the Python functions can never disagree about a model. The scheduler
simulator (docs/javascripts/scheduler-sim.js) reads `javascripts/scheduler-sim.json`: the
step-time model's numbers for the model, GPU and efficiency its page simulates.
"""

from __future__ import annotations

import json

from mkdocs.structure.files import File

from llmserve_ref.planning.capacity import kv_cache_tokens
from llmserve_ref.planning.hardware import gpu
from llmserve_ref.planning.model_catalog import catalog_as_json, model
from llmserve_ref.planning.roofline import VLLM_H100, StepCost

# What the scheduler-simulator page simulates: one H100 serving Llama-3.1-8B at the
# efficiency vLLM measured, in 16-token blocks.
SIMULATED = ("Llama-3.1-8B", "H100-SXM", VLLM_H100, 16)


def step_cost_as_dict(cost: StepCost) -> dict:
    """The public numbers of a `StepCost`, which scheduler-sim.js turns into step times."""
    return {
        "weightBytes": cost.weight_bytes,
        "kvBytesPerToken": cost.kv_bytes_per_token,
        "flopsPerToken": cost.flops_per_token,
        "flopsPerPair": cost.flops_per_pair,
        "peakFlops": cost.roof.peak_flops,
        "memoryBandwidth": cost.roof.memory_bandwidth,
        "mfu": cost.efficiency.mfu,
        "mbu": cost.efficiency.mbu,
    }


def scheduler_sim_json() -> str:
    """The page simulator's data: its step cost, and the KV blocks the GPU would hold."""
    name, gpu_name, efficiency, block_size = SIMULATED
    m, g = model(name), gpu(gpu_name)
    return json.dumps(
        {
            "model": name,
            "gpu": gpu_name,
            "cost": step_cost_as_dict(StepCost(m, g, efficiency=efficiency)),
            "blockSize": block_size,
            "gpuBlocks": kv_cache_tokens(m, g) // block_size,
        }
    )


def on_files(files, config):
    files.append(File.generated(config, "javascripts/kv-catalog.json", content=catalog_as_json()))
    files.append(
        File.generated(config, "javascripts/scheduler-sim.json", content=scheduler_sim_json())
    )
    return files
