"""What other systems and papers state, each with where it says so: one home per fact.

A page that quotes a vLLM default or a paper's figure reads it from here, written into its
prose at build time (``{{ llmserve_ref.planning.published.VLLM.gpu_memory_utilization }}``,
see hooks/package_values.py) or imported by a block, so the fact is typed once, next to its
source and the version it was read from. The engines session checks the vLLM defaults
against the vLLM it installs (tests/peers/test_published_vs_vllm.py).

>>> VLLM.version, VLLM.gpu_memory_utilization
('0.32.0', 0.92)
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class VLLMDefaults:
    """vLLM's defaults that the pages and the package use, as of `version`."""

    version: str = "0.32.0"
    # vllm/config/cache.py, CacheConfig.gpu_memory_utilization: the share of a GPU's memory
    # (on the CPU backend, of its NUMA node's) the engine may use for weights, activations
    # and the KV cache.
    gpu_memory_utilization: float = 0.92


VLLM = VLLMDefaults()


@dataclass(frozen=True)
class VLLMOfflineBatchDefaults:
    """The scheduler limits vLLM picks for offline runs on a large GPU, in `versions`.

    Offline is the `LLM` class, which `vllm bench throughput` drives (usage context
    `LLM_CLASS`); a large GPU has at least `min_gpu_memory_gib` GiB and is not an A100.
    vLLM's OpenAI-compatible server gets a smaller token budget on the same GPU.
    """

    # vllm/engine/arg_utils.py, EngineArgs.get_batch_defaults: the branch for
    # `device_memory >= 70 * GiB_bytes and "a100" not in device_name`, its
    # UsageContext.LLM_CLASS entries. Read in the sdists of vLLM 0.13.0 (the version that
    # ran the torchao benchmarks, see `roofline.VLLM_H100` and `TORCHAO_H100`) and of
    # 0.32.0, which agree (0.32.0 adds a branch for 160 GiB and more, with the same
    # offline values).
    versions: tuple[str, ...] = ("0.13.0", "0.32.0")
    min_gpu_memory_gib: int = 70
    max_num_batched_tokens: int = 16384
    max_num_seqs: int = 1024


VLLM_OFFLINE = VLLMOfflineBatchDefaults()


@dataclass(frozen=True)
class TorchaoH100Llama8B:
    """Published throughputs of Llama-3.1-8B on one H100 that the package is not fitted to.

    The bf16 row of the same table is what `roofline.VLLM_H100` is fitted to (the
    comment above it gives those figures); these check the fit on runs it never saw.
    """

    # PyTorch's torchao docs, docs/source/workflows/inference.md, "e2e model level
    # benchmarks", NVIDIA H100, float8_rowwise row (fp8 weights and activations, KV cache
    # in bf16), vLLM 0.13.0, prompt + output tokens/s of
    # `vllm bench throughput --num_prompts 32 --input_len 4096 --output_len 32` (prefill-
    # bound) and `--num_prompts 128 --input_len 32 --output_len 2048` (decode-bound),
    # https://github.com/pytorch/ao/blob/36027d82d1ad9949597ea16002ff4940374b1b94/docs/source/workflows/inference.md
    fp8_prefill_bound_tokens_per_s: float = 45312.5
    fp8_decode_bound_tokens_per_s: float = 8025.95
    # torchao's README of October 2024, torchao/quantization/README.md, "Benchmarks",
    # "CUDA backend | NVIDIA-H100 GPU", Llama-3.1-8B "Base (bfloat16)": tokens/s decoding
    # one sequence with torchao's own compiled generator (torchao/_models/llama/generate.py),
    # not vLLM,
    # https://github.com/pytorch/ao/blob/92dd5f557d32ce616a138dfe0bdc195355271514/torchao/quantization/README.md#benchmarks
    bf16_batch1_decode_tokens_per_s: float = 126.90


TORCHAO_H100 = TorchaoH100Llama8B()


@dataclass(frozen=True)
class GQAPaper:
    """Ainslie et al., "GQA: Training Generalized Multi-Query Transformer Models from
    Multi-Head Checkpoints", EMNLP 2023, https://arxiv.org/abs/2305.13245."""

    # The abstract ("uptraining existing multi-head language model checkpoints into models
    # with MQA using 5% of original pre-training compute") and Section 2.1, where the share
    # is alpha, the proportion of the original pre-training steps a converted checkpoint is
    # uptrained for.
    uptraining_share: float = 0.05


GQA_PAPER = GQAPaper()


@dataclass(frozen=True)
class Int8TensorCorePeaks:
    """INT8 Tensor Core peaks in TOPS, as NVIDIA's datasheets print them.

    The hardware catalog keeps bf16 and fp8 peaks only; W8A8 in int8 needs these.
    """

    # H100 datasheet, https://www.nvidia.com/en-us/data-center/h100/, H100 SXM column,
    # "INT8 Tensor Core 3,958 TOPS*", where * means with sparsity: dense is half.
    h100_sxm_with_sparsity: int = 3958
    # A100 datasheet, https://www.nvidia.com/en-us/data-center/a100/, "INT8 Tensor Core
    # 624 TOPS | 1248 TOPS*": dense, then with sparsity.
    a100_dense: int = 624


INT8_TOPS = Int8TensorCorePeaks()


@dataclass(frozen=True)
class PagedAttentionPaper:
    """Kwon et al., "Efficient Memory Management for Large Language Model Serving with
    PagedAttention", SOSP 2023, https://arxiv.org/abs/2309.06180 (v1)."""

    # Section 1 (and Figure 2, "Average percentage of memory wastes in different LLM serving
    # systems during the experiment in §6.2"): "only 20.4% - 38.2% of the KV cache memory is
    # used to store the actual token states in the existing systems".
    token_state_share_low: float = 0.204
    token_state_share_high: float = 0.382
    # The abstract: "vLLM improves the throughput of popular LLMs by 2-4x with the same level
    # of latency compared to the state-of-the-art systems, such as FasterTransformer and Orca".
    throughput_gain_low: int = 2
    throughput_gain_high: int = 4
    # Section 6.2 (Figure 12, first row: OPT-13B, 66B and 175B on ShareGPT), read in the
    # paper's text: "vLLM can sustain 1.7×–2.7× higher request rates compared to Orca
    # (Oracle) and 2.7×–8× compared to Orca (Max), while maintaining similar latencies".
    # Orca (Max) reserves each request the model's maximum sequence length, Orca (Oracle)
    # exactly the output it will write (Section 6.1). Its latency is the normalized latency:
    # each request's end-to-end latency divided by its output length, averaged.
    rate_gain_vs_oracle_low: float = 1.7
    rate_gain_vs_oracle_high: float = 2.7
    rate_gain_vs_max_low: float = 2.7
    rate_gain_vs_max_high: float = 8.0
    # Same section, Figure 13a (OPT-13B, ShareGPT at 2 requests/s): vLLM "processes 2.2×
    # more requests at the same time than Orca (Oracle) and 4.3× more requests than Orca
    # (Max)".
    batched_vs_oracle: float = 2.2
    batched_vs_max: float = 4.3
    # Section 7.2, "Impact of block size", Figure 18b: on ShareGPT, block sizes from 16 to
    # 128 perform best; on Alpaca's shorter sequences, 16 and 32 do and larger ones lose,
    # which is why vLLM's default is 16.
    best_block_size_low: int = 16
    best_block_size_high: int = 128


PAGED_ATTENTION_PAPER = PagedAttentionPaper()


@dataclass(frozen=True)
class SGLangRouter:
    """SGLang's router (the SGLang Model Gateway): how it spreads requests over replicas."""

    # sgl-project/sglang, docs/advanced_features/router.md at commit
    # 046ed665927fef15969f34e06a2552b721edd063, "Load Balancing Policies": `cache_aware`,
    # the default, "combines cache locality with load balancing, falling back to shortest
    # queue"; the thresholds are the "Cache-Aware Tuning" table's defaults (the same page's
    # example command passes --cache-threshold 0.5 and --balance-abs-threshold 32).
    default_policy: str = "cache_aware"
    cache_threshold: float = 0.3  # "Minimum prefix match ratio"
    balance_abs_threshold: int = 64  # "Absolute load threshold"
    balance_rel_threshold: float = 1.5  # "Relative load ratio"


SGLANG_ROUTER = SGLangRouter()


@dataclass(frozen=True)
class OpenAIPromptCaching:
    """How OpenAI's API caches prompts, routes them to their cache, and prices cached input."""

    # openai/openai-cookbook, examples/Prompt_Caching_201.ipynb at commit
    # 0dee719e3d86c5679443d5790b2cd0910f57152a, section 1.1: caching "works automatically for
    # prompts containing 1024 tokens or more, with cache hits occurring in increments of 128
    # tokens"; section 4.4: "Requests are routed to inference engines based on a hash of the
    # first ~256 tokens of the prompt", and an engine takes "roughly ~15 requests per minute
    # per prefix" before the excess spreads to more machines, each "a one-time cache miss".
    min_prompt_tokens: int = 1024
    hit_increment_tokens: int = 128
    routing_prefix_tokens: int = 256
    requests_per_minute_per_prefix: int = 15
    # Section 2.2, "Cost Impact": the cached-input discount on the input price per model.
    gpt_4o_cached_discount: float = 0.50
    gpt_4_1_cached_discount: float = 0.75
    gpt_5_2_cached_discount: float = 0.90


OPENAI_PROMPT_CACHING = OpenAIPromptCaching()


@dataclass(frozen=True)
class VLLMBlockSizes:
    """vLLM's KV cache block sizes, in tokens, as of `version`."""

    version: str = "0.32.0"
    # vllm/config/cache.py, CacheConfig.DEFAULT_BLOCK_SIZE: the block size when none is
    # given, unless the attention backend prefers another
    # (Platform.update_block_size_for_backend in vllm/platforms/interface.py).
    default: int = 16
    # vllm/platforms/cpu.py, CpuPlatform.check_and_update_config: `cache_config.block_size =
    # 128` when none is given (models without MLA).
    cpu_default: int = 128
    # vllm/v1/attention/backends/cpu_attn.py, CPUAttentionBackend.
    # get_supported_kernel_block_sizes: `[MultipleOf(32)]`.
    cpu_multiple_of: int = 32


VLLM_BLOCK_SIZES = VLLMBlockSizes()


@dataclass(frozen=True)
class VLLMMetricBuckets:
    """The bucket edges of vLLM's Prometheus histograms, so that its dashboards read ours.

    vllm/v1/metrics/buckets.py in 0.32.0, one family each: request_latency for the
    end-to-end, queue, inference, prefill and decode times of a request; time_to_first_token;
    inter_token_latency for the gap between tokens and a request's time per output token;
    iteration_tokens for the tokens of one engine step; request_params_n;
    request_num_preemptions. The token counts of a request use a 1-2-5 series up to the
    model's length (`build_1_2_5_buckets`).
    """

    version: str = "0.32.0"
    request_latency: tuple[float, ...] = (
        0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
        120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
    )  # fmt: skip
    time_to_first_token: tuple[float, ...] = (
        0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
        10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
    )  # fmt: skip
    inter_token_latency: tuple[float, ...] = (
        0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
        10.0, 20.0, 40.0, 80.0,
    )  # fmt: skip
    iteration_tokens: tuple[float, ...] = (
        1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384,
    )  # fmt: skip
    request_params_n: tuple[float, ...] = (1, 2, 5, 10, 20)
    request_num_preemptions: tuple[float, ...] = (1, 2, 3, 4, 5, 10, 20)


VLLM_METRIC_BUCKETS = VLLMMetricBuckets()


@dataclass(frozen=True)
class VLLMBenchServeDefaults:
    """What `vllm bench serve` does when a flag is not given, as of `version`: where
    ``llmserve-ref bench`` (`llmserve_ref.bench.bench_cli`) departs from it, and why it
    sends ``ignore_eos`` by default."""

    version: str = "0.32.0"
    # vllm/benchmarks/datasets/datasets.py: add_dataset_parser's --num-prompts
    # (DEFAULT_NUM_PROMPTS) and --dataset-name, and the random dataset's
    # --random-input-len and --random-output-len.
    num_prompts: int = 1000
    dataset_name: str = "random"
    random_input_len: int = 1024
    random_output_len: int = 128
    # vllm/benchmarks/serve.py, add_cli_args: --num-warmups, and --metric-percentiles, "99",
    # the one percentile reported; main_async: --percentile-metrics for a generative backend.
    num_warmups: int = 0
    metric_percentile: float = 99.0
    percentile_metrics: str = "ttft,tpot,itl"
    # add_cli_args: --ignore-eos is a store_true flag, off unless given; main_async turns it
    # on for the random dataset (and random-mm) with an OpenAI-compatible backend, "so
    # generation runs to the requested length".
    ignore_eos_action: str = "store_true"
    ignore_eos_dataset: str = "random"
    # add_cli_args: --request-rate, `default=float("inf")`, "If this is inf, then all the
    # requests are sent at time 0"; read at commit 009e6d4a1cd6ba3fb2a9fc00f4ec06f5297232a1 of
    # vllm-project/vllm (the file as stored there, not the 0.32.0 sdist the fields above
    # were read in).
    request_rate: float = float("inf")


VLLM_BENCH_SERVE = VLLMBenchServeDefaults()


@dataclass(frozen=True)
class VLLMCPUWheels:
    """Where vLLM's own x86 CPU wheels come from."""

    # vllm-project/vllm, docs/getting_started/installation/cpu.x86.inc.md at commit
    # 02319794a1415e663baaf6de2f8197f795bd8c03, "pre-built-wheels": "Pre-built vLLM wheels for
    # x86 with AVX512/AVX2 are available since version 0.17.0", installed from
    # https://github.com/vllm-project/vllm/releases/download/v${VLLM_VERSION}/
    # vllm-${VLLM_VERSION}+cpu-cp38-abi3-manylinux_2_34_x86_64.whl with PyTorch's CPU index.
    # (Earlier versions of the same file said wheels "for x86 with AVX512" since 0.13.0,
    # at first from wheels.vllm.ai, later as manylinux_2_35 files on the releases.)
    release_wheels_since: str = "0.17.0"


VLLM_CPU_WHEELS = VLLMCPUWheels()


@dataclass(frozen=True)
class VLLMPrefixHashing:
    """When vLLM's prefix cache moved from Python's `hash` to SHA-256."""

    # vllm-project/vllm, docs/design/prefix_caching.md, "Note 2", as merged in
    # https://github.com/vllm-project/vllm/pull/29261: "SHA256 is supported since vLLM v0.8.3
    # and the default since v0.10.2". The option (--prefix-caching-hash-algo sha256) came
    # with https://github.com/vllm-project/vllm/pull/15297.
    sha256_since: str = "0.8.3"
    sha256_default_since: str = "0.10.2"


VLLM_PREFIX_HASHING = VLLMPrefixHashing()


@dataclass(frozen=True)
class SGLangServerDefaults:
    """SGLang's server arguments that the pages set beside vLLM's."""

    # sgl-project/sglang, python/sglang/srt/server_args.py at commit
    # 001067fffe33427bee0ed2f007fb7551a1d76b44, ServerArgs.port: "The port of the HTTP
    # server.", 30000.
    port: int = 30000
    # Same file: ServerArgs.page_size is None unless given, "The number of tokens in a page";
    # python/sglang/srt/arg_groups/overrides.py at commit
    # 003bbaf9ab79c09933e7a17ae6460ac48a756de9, _page_size_default, makes it 1 (64 on MUSA
    # GPUs and for ROCm's vectorized_5d KV layout; some models pick their own).
    # docs/advanced_features/server_arguments.md at commit
    # 004813e1dd464844bd92ddbca5cab8c024a75f78 gives `--page-size` the default 1.
    page_size: int = 1
    # server_args.py, ServerArgs.chunked_prefill_size: "The maximum number of tokens in a
    # chunk for the chunked prefill. Setting this to -1 means disabling chunked prefill."
    chunked_prefill_off: int = -1


SGLANG_SERVER = SGLangServerDefaults()
