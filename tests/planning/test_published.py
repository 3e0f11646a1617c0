"""The facts other systems and papers state, against their sources, typed in here by hand.

`SOURCES` quotes each source where it prints the figure (a default in code, a sentence of
a paper, a row of a table) and names the figure in the quote that a field keeps, written
as the source writes it: "20.4%" is kept as 0.204, "3,958" TOPS as 3958. The quotes were
read in the sources the module names (the vLLM and SGLang files, the OpenAI cookbook
notebook and the torchao table at the commits given there, the papers' arXiv versions,
NVIDIA's datasheets). That the installed vLLM still agrees is checked by
tests/peers/test_published_vs_vllm.py.

The structure is checked too: every fact is a field of a frozen dataclass with a default,
one module-level instance per class, each class naming where its facts come from.
"""

from __future__ import annotations

import dataclasses
import inspect
import re

import pytest

from llmserve_ref.planning import published

# (instance, field) -> (the source's words, the figure in them that the field keeps)
SOURCES = {
    ("VLLM", "gpu_memory_utilization"): (
        "vllm/config/cache.py: gpu_memory_utilization: float = Field(default=0.92, gt=0, le=1)",
        "0.92",
    ),
    ("VLLM_BLOCK_SIZES", "default"): ("vllm/config/cache.py: DEFAULT_BLOCK_SIZE = 16", "16"),
    ("VLLM_BLOCK_SIZES", "cpu_default"): ("cache_config.block_size = 128", "128"),
    ("VLLM_BLOCK_SIZES", "cpu_multiple_of"): ("return [MultipleOf(32)]", "32"),
    ("VLLM_OFFLINE", "max_num_batched_tokens"): ("UsageContext.LLM_CLASS: 16384", "16384"),
    ("VLLM_OFFLINE", "max_num_seqs"): ("UsageContext.LLM_CLASS: 1024", "1024"),
    ("VLLM_OFFLINE", "min_gpu_memory_gib"): ("device_memory >= 70 * GiB_bytes", "70"),
    ("SGLANG_ROUTER", "default_policy"): ("`cache_aware`, the default", "cache_aware"),
    ("SGLANG_ROUTER", "cache_threshold"): ("| `--cache-threshold` | 0.3 |", "0.3"),
    ("SGLANG_ROUTER", "balance_abs_threshold"): ("| `--balance-abs-threshold` | 64 |", "64"),
    ("SGLANG_ROUTER", "balance_rel_threshold"): ("| `--balance-rel-threshold` | 1.5 |", "1.5"),
    ("OPENAI_PROMPT_CACHING", "min_prompt_tokens"): (
        "works automatically for prompts containing 1024 tokens or more",
        "1024",
    ),
    ("OPENAI_PROMPT_CACHING", "hit_increment_tokens"): (
        "with cache hits occurring in increments of 128 tokens",
        "128",
    ),
    ("OPENAI_PROMPT_CACHING", "routing_prefix_tokens"): (
        "based on a hash of the first ~256 tokens of the prompt",
        "256",
    ),
    ("OPENAI_PROMPT_CACHING", "requests_per_minute_per_prefix"): (
        "Inference engines can handle roughly ~15 requests per minute per prefix",
        "15",
    ),
    ("OPENAI_PROMPT_CACHING", "gpt_4o_cached_discount"): (
        "| gpt-4o | $2.50 | $1.25 | 50.00% |",
        "50.00%",
    ),
    ("OPENAI_PROMPT_CACHING", "gpt_4_1_cached_discount"): (
        "| gpt-4.1 | $2.00 | $0.50 | 75.00% |",
        "75.00%",
    ),
    ("OPENAI_PROMPT_CACHING", "gpt_5_2_cached_discount"): (
        "| gpt-5.2 | $1.75 | $0.175 | 90.00% |",
        "90.00%",
    ),
    ("TORCHAO_H100", "fp8_prefill_bound_tokens_per_s"): (
        "| float8_rowwise | float8_rowwise | 45312.5 | 8025.95 | 1.464 | 1.214 |",
        "45312.5",
    ),
    ("TORCHAO_H100", "fp8_decode_bound_tokens_per_s"): (
        "| float8_rowwise | float8_rowwise | 45312.5 | 8025.95 | 1.464 | 1.214 |",
        "8025.95",
    ),
    ("TORCHAO_H100", "bf16_batch1_decode_tokens_per_s"): ("Base (bfloat16) | 126.90", "126.90"),
    ("GQA_PAPER", "uptraining_share"): ("using 5% of original pre-training compute", "5%"),
    ("INT8_TOPS", "h100_sxm_with_sparsity"): ("INT8 Tensor Core 3,958 TOPS*", "3,958"),
    ("INT8_TOPS", "a100_dense"): ("INT8 Tensor Core 624 TOPS | 1248 TOPS*", "624"),
    ("PAGED_ATTENTION_PAPER", "token_state_share_low"): (
        "only 20.4% - 38.2% of the KV cache memory is used to store the actual token states",
        "20.4%",
    ),
    ("PAGED_ATTENTION_PAPER", "token_state_share_high"): (
        "only 20.4% - 38.2% of the KV cache memory is used to store the actual token states",
        "38.2%",
    ),
    ("PAGED_ATTENTION_PAPER", "throughput_gain_low"): ("by 2-4x with the same latency", "2"),
    ("PAGED_ATTENTION_PAPER", "throughput_gain_high"): ("by 2-4x with the same latency", "4"),
    ("PAGED_ATTENTION_PAPER", "rate_gain_vs_oracle_low"): (
        "1.7×–2.7× higher request rates compared to Orca (Oracle)",
        "1.7",
    ),
    ("PAGED_ATTENTION_PAPER", "rate_gain_vs_oracle_high"): (
        "1.7×–2.7× higher request rates compared to Orca (Oracle)",
        "2.7",
    ),
    ("PAGED_ATTENTION_PAPER", "rate_gain_vs_max_low"): (
        "and 2.7×–8× compared to Orca (Max)",
        "2.7",
    ),
    ("PAGED_ATTENTION_PAPER", "rate_gain_vs_max_high"): ("and 2.7×–8× compared to Orca (Max)", "8"),
    ("PAGED_ATTENTION_PAPER", "batched_vs_oracle"): (
        "processes 2.2× more requests at the same time than Orca (Oracle)",
        "2.2",
    ),
    ("PAGED_ATTENTION_PAPER", "batched_vs_max"): ("and 4.3× more requests than Orca (Max)", "4.3"),
    ("PAGED_ATTENTION_PAPER", "best_block_size_low"): ("block sizes from 16 to 128", "16"),
    ("PAGED_ATTENTION_PAPER", "best_block_size_high"): ("block sizes from 16 to 128", "128"),
}
# vLLM's histogram bucket edges, as vllm/v1/metrics/buckets.py (0.32.0) lists them.
VLLM_BUCKETS = {
    "request_latency": (
        "REQUEST_LATENCY_BUCKETS",
        "(0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, "
        "120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)",
    ),
    "time_to_first_token": (
        "TIME_TO_FIRST_TOKEN_BUCKETS",
        "(0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, "
        "7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)",
    ),
    "inter_token_latency": (
        "INTER_TOKEN_LATENCY_BUCKETS",
        "(0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, "
        "10.0, 20.0, 40.0, 80.0)",
    ),
    "iteration_tokens": (
        "ITERATION_TOKENS_BUCKETS",
        "(1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)",
    ),
    "request_params_n": ("REQUEST_PARAMS_N_BUCKETS", "(1, 2, 5, 10, 20)"),
    "request_num_preemptions": ("REQUEST_NUM_PREEMPTIONS_BUCKETS", "(1, 2, 3, 4, 5, 10, 20)"),
}
SOURCES |= {
    ("VLLM_METRIC_BUCKETS", field): (f"vllm/v1/metrics/buckets.py: {name} = {edges}", edges)
    for field, (name, edges) in VLLM_BUCKETS.items()
}

# `vllm bench serve`'s defaults, as vllm/benchmarks/serve.py and datasets/datasets.py (0.32.0)
# write them.
VLLM_BENCH_SERVE = {
    "num_prompts": ("DEFAULT_NUM_PROMPTS = 1000", "1000"),
    "dataset_name": ('"--dataset-name", type=str, default="random"', "random"),
    "random_input_len": ('"--random-input-len", type=int, default=1024', "1024"),
    "random_output_len": ('"--random-output-len", type=int, default=128', "128"),
    "num_warmups": ('"--num-warmups", type=int, default=0', "0"),
    "metric_percentile": ('"--metric-percentiles", type=str, default="99"', "99"),
    "percentile_metrics": ('default_percentile_metrics = "ttft,tpot,itl"', "ttft,tpot,itl"),
    "ignore_eos_action": ('"--ignore-eos", action="store_true"', "store_true"),
    "ignore_eos_dataset": (
        'if args.dataset_name in ("random", "random-mm") and args.backend in '
        "OPENAI_COMPATIBLE_BACKENDS: args.ignore_eos = True",
        "random",
    ),
    # read at commit 009e6d4a1cd6ba3fb2a9fc00f4ec06f5297232a1; tests/peers/test_bench_vs_vllm.py
    # checks the installed 0.32.0
    "request_rate": ('"--request-rate", type=float, default=float("inf")', "inf"),
}
SOURCES |= {("VLLM_BENCH_SERVE", field): source for field, source in VLLM_BENCH_SERVE.items()}
SOURCES |= {
    ("VLLM_CPU_WHEELS", "release_wheels_since"): (
        "Pre-built vLLM wheels for x86 with AVX512/AVX2 are available since version 0.17.0",
        "0.17.0",
    ),
    ("VLLM_PREFIX_HASHING", "sha256_since"): (
        "SHA256 is supported since vLLM v0.8.3 and the default since v0.10.2",
        "0.8.3",
    ),
    ("VLLM_PREFIX_HASHING", "sha256_default_since"): (
        "SHA256 is supported since vLLM v0.8.3 and the default since v0.10.2",
        "0.10.2",
    ),
    ("SGLANG_SERVER", "port"): (
        'port: A[int, "The port of the HTTP server.", NS("serving")] = 30000',
        "30000",
    ),
    ("SGLANG_SERVER", "page_size"): (
        'if not get_platform().is_musa: return {"page_size": 1}',
        "1",
    ),
    ("SGLANG_SERVER", "chunked_prefill_off"): (
        "Setting this to -1 means disabling chunked prefill.",
        "-1",
    ),
}

VERSIONS = {
    "VLLM": "0.32.0",
    "VLLM_BLOCK_SIZES": "0.32.0",
    "VLLM_METRIC_BUCKETS": "0.32.0",
    "VLLM_BENCH_SERVE": "0.32.0",
}


def read(figure: str) -> float | str | tuple[float, ...]:
    """A figure as the package keeps it: "3,958" is 3958, "20.4%" is 0.204, "(1, 2.5)" is a
    tuple of numbers (a source's list of bucket edges); words stay."""
    if figure.startswith("(") and figure.endswith(")"):
        return tuple(float(x) for x in figure[1:-1].split(", "))
    number = figure.replace(",", "").removesuffix("%")
    try:
        value = float(number)
    except ValueError:
        return figure
    return value / 100 if figure.endswith("%") else value


def instances() -> dict[str, object]:
    """The module's facts: its upper-case names bound to dataclass instances."""
    return {
        name: value
        for name, value in vars(published).items()
        if name.isupper() and dataclasses.is_dataclass(value) and not isinstance(value, type)
    }


@pytest.mark.parametrize(("instance", "field"), list(SOURCES), ids=[f"{i}.{f}" for i, f in SOURCES])
def test_each_fact_is_what_its_source_prints(instance, field):
    words, figure = SOURCES[instance, field]
    assert figure in words  # the figure as printed, in its context
    expected = read(figure)
    value = getattr(getattr(published, instance), field)
    if isinstance(expected, str):
        assert value == expected
    else:
        assert value == pytest.approx(expected, rel=1e-12, abs=0)


def test_every_fact_the_module_keeps_is_checked_here():
    kept = {
        (name, f.name)
        for name, value in instances().items()
        for f in dataclasses.fields(value)
        if f.name not in ("version", "versions")
    }
    assert kept == set(SOURCES)


def test_versions_are_the_ones_read():
    assert {name: published.__dict__[name].version for name in VERSIONS} == VERSIONS
    assert published.VLLM_OFFLINE.versions == ("0.13.0", "0.32.0")
    assert published.VLLM.version in published.VLLM_OFFLINE.versions


@pytest.mark.parametrize("name", sorted(instances()))
def test_each_fact_is_a_frozen_default_with_a_named_source(name):
    value = instances()[name]
    cls = type(value)
    assert cls.__module__ == published.__name__
    assert cls.__dataclass_params__.frozen
    assert value == cls()  # the instance is the defaults: one place holds each fact
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(value, dataclasses.fields(value)[0].name, None)
    source = inspect.getsource(cls)
    assert re.search(r"https://|\b[\w-]+/[\w/.-]+\.(?:py|md|ipynb)\b", source), (
        f"{cls.__name__} names no source (a URL, or a file of the project it quotes)"
    )


def test_one_instance_per_class():
    classes = [type(value) for value in instances().values()]
    assert len(classes) == len(set(classes))
    defined = {
        c for c in vars(published).values() if dataclasses.is_dataclass(c) and isinstance(c, type)
    }
    assert set(classes) == defined


def test_ranges_are_ordered_and_shares_are_shares():
    paper = published.PAGED_ATTENTION_PAPER
    assert 0 < paper.token_state_share_low < paper.token_state_share_high < 1
    assert paper.throughput_gain_low < paper.throughput_gain_high
    assert paper.rate_gain_vs_oracle_low < paper.rate_gain_vs_oracle_high
    assert paper.rate_gain_vs_max_low < paper.rate_gain_vs_max_high
    assert paper.batched_vs_oracle < paper.batched_vs_max  # Max reserves more than Oracle
    sizes = (
        paper.best_block_size_low,
        paper.best_block_size_high,
        published.VLLM_BLOCK_SIZES.default,
    )
    assert all(s & (s - 1) == 0 for s in sizes)  # powers of two
    assert paper.best_block_size_low <= published.VLLM_BLOCK_SIZES.default
    caching = published.OPENAI_PROMPT_CACHING
    discounts = (caching.gpt_4o_cached_discount, caching.gpt_4_1_cached_discount,
                 caching.gpt_5_2_cached_discount)  # fmt: skip
    assert all(0 < d < 1 for d in discounts) and list(discounts) == sorted(discounts)
    assert caching.min_prompt_tokens % caching.hit_increment_tokens == 0
    assert 0 < published.VLLM.gpu_memory_utilization <= 1
    assert 0 < published.GQA_PAPER.uptraining_share < 1
    assert published.VLLM_BLOCK_SIZES.cpu_default % published.VLLM_BLOCK_SIZES.cpu_multiple_of == 0
