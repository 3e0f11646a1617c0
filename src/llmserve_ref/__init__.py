"""Reference implementations behind the llmserve curriculum.

Every module is one concept from LLM inference and serving, written to be read,
and every page of the site shows code from here.

The module map. The package is layered, kernels/ < model/ < engine/ < planning/ <
serving/ < bench/, with device.py under all of them and cli.py above: a module imports
only from its own layer or a lower one (tests/package/test_layers.py checks it). Each
entry says what the module is and names the pages that use it, ``stage-N/page`` for
docs/stage-N/page.md (a page uses a module when it includes a section of it or imports
from it); tests/package/test_module_map.py keeps the list complete and current.

device.py, under every layer:

* ``device``: the torch device examples, snippets and tests run on.
  Pages: stage-1/tokens-and-the-generation-loop, stage-2/attention, stage-2/sampling-and-decoding,
  stage-3/kv-cache, stage-4/prefill-vs-decode, stage-5/memory-vs-compute-bound, stage-5/mqa-and-gqa,
  stage-6/flashattention, stage-6/quantization, stage-6/speculative-decoding,
  stage-7/pagedattention, stage-8/paged-kv-allocator, stage-8/prefix-caching.

kernels/, attention as functions on tensors (PyTorch references, Triton kernels):

* ``kernels.flash_attention``: FlashAttention in plain PyTorch: tiles and the online softmax.
  Pages: stage-6/flashattention, stage-7/pagedattention.
* ``kernels.grouped_attention``: the tiny model's attention: causal, grouped-query, no K/V copy.
  Pages: stage-2/attention, stage-6/tensor-and-pipeline-parallelism, stage-7/pagedattention.
* ``kernels.paged_attention``: PagedAttention: attention over K/V kept in fixed-size blocks.
  Pages: stage-7/pagedattention.
* ``kernels.triton_attention``: FlashAttention in Triton: prefill, and split-KV decode.
  Pages: stage-6/flashattention, stage-7/pagedattention.
* ``kernels.triton_paged_attention``: paged decode attention in Triton, blocks read in place.
  Pages: stage-7/pagedattention.

model/, the tiny Llama and what runs one sequence on it:

* ``model.attention_probe``: reads one layer's queries, keys, values and attention weights.
  Pages: stage-2/attention.
* ``model.chat_template``: chat messages to the one token sequence the model continues.
  Pages: stage-3/run-a-model-locally, stage-8/prefix-caching.
* ``model.corpus``: the tiny models' training text, written by a seeded story generator.
  Pages: stage-1/tokens-and-the-generation-loop, stage-2/sampling-and-decoding,
  stage-5/mqa-and-gqa, stage-6/quantization.
* ``model.detokenizer``: token ids to the text a client may see, one token at a time.
  Pages: stage-6/streaming.
* ``model.forward_step``: one forward pass of new tokens after cached ones, ready to time.
  Pages: stage-3/kv-cache, stage-4/prefill-vs-decode, stage-5/memory-vs-compute-bound.
* ``model.generate``: the generation loop: prefill the prompt once, then decode one token per step.
  Pages: stage-1/tokens-and-the-generation-loop, stage-2/sampling-and-decoding, stage-3/kv-cache,
  stage-4/prefill-vs-decode, stage-6/quantization, stage-6/speculative-decoding,
  stage-7/pagedattention, stage-8/paged-kv-allocator.
* ``model.gguf_export``: exports the tiny model to GGUF for llama.cpp and Ollama.
  Pages: stage-3/run-a-model-locally.
* ``model.gqa``: multi-head to grouped-query attention: mean-pool K/V heads, uptrain.
  Pages: stage-5/mqa-and-gqa.
* ``model.kv_cache``: the KV cache of one batch: every layer's keys and values, kept.
  Pages: stage-2/attention, stage-3/kv-cache, stage-4/kv-cache-size-math, stage-6/quantization,
  stage-6/speculative-decoding.
* ``model.llama``: the tiny Llama: RMSNorm, RoPE, attention, MLP, decoder layers.
  Pages: stage-1/tokens-and-the-generation-loop, stage-2/attention, stage-3/kv-cache,
  stage-4/prefill-vs-decode, stage-5/memory-vs-compute-bound, stage-5/mqa-and-gqa,
  stage-6/speculative-decoding, stage-6/tensor-and-pipeline-parallelism, stage-7/pagedattention,
  stage-8/prefix-caching, stage-9/running-a-serving-engine.
* ``model.llama_config``: the tiny Llama's shape, with Hugging Face's ``LlamaConfig`` names.
  Pages: stage-2/attention, stage-5/memory-vs-compute-bound,
  stage-6/tensor-and-pipeline-parallelism.
* ``model.parallel``: tensor and pipeline parallelism across processes (torch.distributed).
  Pages: stage-6/tensor-and-pipeline-parallelism.
* ``model.quantization``: weights and the KV cache in fewer bits, and computing with them.
  Pages: stage-6/quantization.
* ``model.sampling``: samplers: how next-token logits become the next token.
  Pages: stage-1/tokens-and-the-generation-loop, stage-2/sampling-and-decoding, stage-3/kv-cache,
  stage-4/prefill-vs-decode, stage-6/quantization, stage-6/speculative-decoding,
  stage-7/pagedattention, stage-8/paged-kv-allocator, stage-8/prefix-caching.
* ``model.tokenizer``: byte-level BPE: text to token ids and back.
  Pages: stage-3/run-a-model-locally, stage-6/streaming, stage-9/running-a-serving-engine.
* ``model.train``: retrains the tiny target and draft models from nothing, reproducibly.
  Pages: stage-5/mqa-and-gqa, stage-6/quantization.
* ``model.weights``: the two tiny trained models shipped: a target and its draft.
  Pages: stage-1/tokens-and-the-generation-loop, stage-2/attention, stage-2/sampling-and-decoding,
  stage-3/kv-cache, stage-3/run-a-model-locally, stage-4/prefill-vs-decode, stage-5/mqa-and-gqa,
  stage-6/quantization, stage-6/speculative-decoding, stage-6/streaming, stage-7/pagedattention,
  stage-8/paged-kv-allocator, stage-8/prefix-caching, stage-9/running-a-serving-engine.

engine/, many requests on one model:

* ``engine.batched_engine``: the serving engine: continuous batching on paged KV.
  Pages: stage-5/ttft-tpot-throughput, stage-6/streaming, stage-8/prefix-caching,
  stage-9/running-a-serving-engine.
* ``engine.block_invariants``: what must hold of the paged allocator after every operation.
  Pages: stage-8/paged-kv-allocator.
* ``engine.block_manager``: the paged KV allocator: block tables, refcounts, prefix cache.
  Pages: stage-7/pagedattention, stage-7/scheduler-simulator, stage-8/paged-kv-allocator,
  stage-8/prefix-caching.
* ``engine.compiled_decode``: the forward compiled: a graph per decode batch size, one for any step.
  Pages: stage-9/running-a-serving-engine.
* ``engine.core_worker``: the engine core's loop in its own process or thread, and its messages.
  Pages: none.
* ``engine.draft_proposer``: a draft model guesses each sequence's next tokens, its KV paged too.
  Pages: stage-6/speculative-decoding.
* ``engine.engine_core``: the engine core: continuous batching on paged KV, one step at a time.
  Pages: stage-6/speculative-decoding, stage-7/pagedattention, stage-8/paged-kv-allocator,
  stage-8/prefix-caching.
* ``engine.engine_config``: the serving engine's knobs, by vLLM's names.
  Pages: stage-8/prefix-caching, stage-9/running-a-serving-engine.
* ``engine.fused_projections``: q, k, v in one matrix multiply, gate and up in another.
  Pages: stage-9/running-a-serving-engine.
* ``engine.interface``: what the HTTP server and an engine hand each other.
  Pages: stage-5/ttft-tpot-throughput, stage-6/speculative-decoding, stage-6/streaming,
  stage-9/running-a-serving-engine.
* ``engine.kv_block``: one block of KV memory, and its name in the prefix cache.
  Pages: stage-6/speculative-decoding, stage-7/pagedattention, stage-7/scheduler-simulator,
  stage-8/paged-kv-allocator, stage-8/prefix-caching.
* ``engine.kv_storage``: the tensors a paged KV cache lives in, indexed by block id.
  Pages: stage-7/pagedattention.
* ``engine.loop_engine``: the first engine: one worker thread, one forward pass per request.
  Pages: stage-5/ttft-tpot-throughput.
* ``engine.malloc_tuning``: keep freed memory in the process: prompt steps without page faults.
  Pages: stage-9/running-a-serving-engine.
* ``engine.model_runner``: one forward pass over every scheduled token, on paged KV.
  Pages: none.
* ``engine.ngram_proposer``: prompt lookup: guesses what follows from an earlier match (ngram).
  Pages: none.
* ``engine.onednn_linear``: linear layers through oneDNN, weights packed once, where AVX-512.
  Pages: stage-9/running-a-serving-engine.
* ``engine.output_processor``: token ids to each stream's text, stop strings, times, endings.
  Pages: stage-6/streaming.
* ``engine.paged_batch``: one step's packed tokens, attending through block tables.
  Pages: stage-7/pagedattention, stage-9/running-a-serving-engine.
* ``engine.request``: a request as the scheduler sees it: counted in tokens.
  Pages: stage-7/pagedattention, stage-7/pd-disaggregation, stage-7/scheduler-simulator,
  stage-8/paged-kv-allocator, stage-8/prefix-caching.
* ``engine.scheduler``: the batching scheduler: token budget, chunked prefill, preemption.
  Pages: stage-7/pagedattention, stage-7/pd-disaggregation, stage-7/scheduler-simulator,
  stage-8/paged-kv-allocator, stage-8/prefix-caching.
* ``engine.scheduler_config``: the knobs of one engine instance: budget, seats, blocks, policy.
  Pages: stage-5/ttft-tpot-throughput, stage-6/speculative-decoding, stage-7/pagedattention,
  stage-7/scheduler-simulator, stage-8/paged-kv-allocator, stage-8/prefix-caching.
* ``engine.scheduler_output``: one step's plan for the engine, and the scheduler's counts.
  Pages: stage-6/speculative-decoding, stage-7/scheduler-simulator.
* ``engine.speculative``: speculative decoding: a draft guesses, the target checks at once.
  Pages: stage-6/speculative-decoding.
* ``engine.speculative_config``: ``--speculative-config``'s vLLM keys, and the proposer they make.
  Pages: stage-6/speculative-decoding.

planning/, numbers before hardware:

* ``planning.capacity``: GPUs for a load under an SLO, cost per token, API break-even.
  Pages: stage-5/ttft-tpot-throughput, stage-6/static-vs-continuous-batching,
  stage-7/cost-and-capacity-planning, stage-7/pagedattention, stage-7/pd-disaggregation,
  stage-7/scheduler-simulator, stage-8/prefix-caching.
* ``planning.fragmentation``: KV memory held versus used: what reserving wastes, and how.
  Pages: stage-7/pagedattention, stage-7/pd-disaggregation, stage-7/scheduler-simulator.
* ``planning.hardware``: the accelerators the pages reason about, each number with its source.
  Pages: stage-3/kv-cache, stage-4/kv-cache-size-math, stage-4/prefill-vs-decode,
  stage-5/memory-vs-compute-bound, stage-5/mqa-and-gqa, stage-5/ttft-tpot-throughput,
  stage-6/flashattention, stage-6/quantization, stage-6/speculative-decoding,
  stage-6/static-vs-continuous-batching, stage-6/tensor-and-pipeline-parallelism,
  stage-7/cost-and-capacity-planning, stage-7/pagedattention, stage-7/pd-disaggregation,
  stage-7/scheduler-simulator, stage-8/prefix-caching.
* ``planning.kv_math``: the bytes a model's keys and values take, and how many requests fit.
  Pages: stage-3/kv-cache, stage-4/kv-cache-size-math, stage-4/prefill-vs-decode,
  stage-5/memory-vs-compute-bound, stage-5/mqa-and-gqa, stage-6/tensor-and-pipeline-parallelism,
  stage-7/pagedattention, stage-7/pd-disaggregation, stage-7/scheduler-simulator,
  stage-9/running-a-serving-engine.
* ``planning.measure``: this machine's measured roof, and how close decoding gets.
  Pages: stage-1/tokens-and-the-generation-loop, stage-2/attention, stage-2/sampling-and-decoding,
  stage-3/kv-cache, stage-4/prefill-vs-decode, stage-5/memory-vs-compute-bound, stage-5/mqa-and-gqa,
  stage-6/quantization, stage-6/speculative-decoding, stage-8/prefix-caching.
* ``planning.model_catalog``: published models the pages compute with, from their `config.json`.
  Pages: stage-1/tokens-and-the-generation-loop, stage-2/sampling-and-decoding, stage-3/kv-cache,
  stage-4/kv-cache-size-math, stage-4/prefill-vs-decode, stage-5/memory-vs-compute-bound,
  stage-5/mqa-and-gqa, stage-5/ttft-tpot-throughput, stage-6/flashattention, stage-6/quantization,
  stage-6/speculative-decoding, stage-6/static-vs-continuous-batching,
  stage-6/tensor-and-pipeline-parallelism, stage-7/cost-and-capacity-planning,
  stage-7/pagedattention, stage-7/pd-disaggregation, stage-7/scheduler-simulator,
  stage-8/prefix-caching.
* ``planning.model_shape``: a model's attention shape, read from its ``config.json``.
  Pages: stage-3/kv-cache, stage-4/kv-cache-size-math, stage-5/mqa-and-gqa,
  stage-7/pd-disaggregation, stage-9/running-a-serving-engine.
* ``planning.phases``: prefill, decode and decode without a cache, as forward passes to time.
  Pages: stage-3/kv-cache, stage-4/prefill-vs-decode.
* ``planning.prefix_sharing``: many requests on one system prompt: blocks held, reads not saved.
  Pages: stage-8/prefix-caching.
* ``planning.published``: what other systems and papers state, each with its source and version.
  Pages: stage-4/kv-cache-size-math, stage-5/mqa-and-gqa, stage-6/benchmark-an-endpoint,
  stage-6/quantization, stage-6/static-vs-continuous-batching, stage-7/cost-and-capacity-planning,
  stage-7/pagedattention, stage-7/scheduler-simulator, stage-8/prefix-caching,
  stage-9/running-a-serving-engine.
* ``planning.radix_cache``: a token-granular prefix matcher: a radix tree over token ids.
  Pages: stage-8/prefix-caching.
* ``planning.roofline``: the roofline: is a step bound by memory bandwidth or by arithmetic?
  Pages: stage-3/kv-cache, stage-4/prefill-vs-decode, stage-5/memory-vs-compute-bound,
  stage-6/quantization, stage-6/speculative-decoding, stage-6/static-vs-continuous-batching,
  stage-7/cost-and-capacity-planning, stage-7/pagedattention, stage-7/pd-disaggregation,
  stage-7/scheduler-simulator, stage-8/prefix-caching.
* ``planning.routing``: routing requests across replicas: least-loaded, random, by prefix.
  Pages: stage-7/pd-disaggregation, stage-7/scheduler-simulator, stage-8/prefix-caching.
* ``planning.simulator``: a discrete-step serving simulator: scheduler plus step-time model.
  Pages: stage-5/ttft-tpot-throughput, stage-6/static-vs-continuous-batching,
  stage-7/cost-and-capacity-planning, stage-7/pagedattention, stage-7/pd-disaggregation,
  stage-7/scheduler-simulator, stage-8/prefix-caching.
* ``planning.slo``: latency targets (TTFT, TPOT, E2E) that decide goodput.
  Pages: stage-5/ttft-tpot-throughput, stage-6/benchmark-an-endpoint,
  stage-7/cost-and-capacity-planning, stage-7/pd-disaggregation, stage-7/scheduler-simulator.
* ``planning.workload``: synthetic workloads: arrivals, lengths, shared prefixes, from a seed.
  Pages: stage-5/ttft-tpot-throughput, stage-6/benchmark-an-endpoint,
  stage-6/static-vs-continuous-batching, stage-7/cost-and-capacity-planning, stage-7/pagedattention,
  stage-7/pd-disaggregation, stage-7/scheduler-simulator, stage-8/prefix-caching,
  stage-9/running-a-serving-engine.
serving/, the HTTP face:

* ``serving.app``: the ASGI app: routes, middleware, error handlers.
  Pages: stage-9/running-a-serving-engine.
* ``serving.chat_requests``: the chat request: messages through the template, and its answers.
  Pages: none.
* ``serving.errors``: OpenAI's error body: how the server says no.
  Pages: stage-9/running-a-serving-engine.
* ``serving.handlers``: the OpenAI route handlers: admit a request, answer it whole or streamed.
  Pages: stage-6/streaming, stage-9/running-a-serving-engine.
* ``serving.launcher``: an engine, the app and the transport, started (names the engines).
  Pages: stage-3/run-a-model-locally, stage-5/ttft-tpot-throughput, stage-6/benchmark-an-endpoint,
  stage-6/static-vs-continuous-batching, stage-6/streaming, stage-8/prefix-caching,
  stage-9/running-a-serving-engine.
* ``serving.limits``: what one request may ask of the server, checked up front.
  Pages: stage-9/running-a-serving-engine.
* ``serving.metrics``: the server's Prometheus metrics in the text format.
  Pages: none.
* ``serving.openai_parsing``: request bytes to a checked request, or an error naming the field.
  Pages: stage-9/running-a-serving-engine.
* ``serving.openai_requests``: the OpenAI API's requests, and what each asks of the engine.
  Pages: none.
* ``serving.openai_responses``: the OpenAI API's answers: objects, chunks, usage, logprobs.
  Pages: stage-6/streaming.
* ``serving.openapi``: the server's OpenAPI 3.1 document (GET /openapi.json).
  Pages: none.
* ``serving.prometheus``: Prometheus' text format by hand: counters, gauges, histograms.
  Pages: none.
* ``serving.streams``: server-sent events: the response that writes each event as it comes.
  Pages: none.
* ``serving.tokenization``: /tokenize, /detokenize and /version, as vLLM serves them.
  Pages: none.
* ``serving.transport``: uvicorn and the sockets: Nagle off, slow headers, graceful shutdown.
  Pages: none.

bench/, a server measured from outside:

* ``bench.bench_cli``: ``llmserve-ref bench``: vLLM's flags, a progress bar on a terminal, report.
  Pages: stage-6/benchmark-an-endpoint.
* ``bench.bench_client``: a benchmark client for OpenAI-compatible streaming endpoints.
  Pages: stage-5/ttft-tpot-throughput, stage-6/benchmark-an-endpoint,
  stage-6/static-vs-continuous-batching, stage-9/running-a-serving-engine.
* ``bench.bench_harness``: servers side by side: loads × runs, fresh prompts, min-median-max.
  Pages: stage-6/speculative-decoding, stage-9/running-a-serving-engine.
* ``bench.bench_metrics``: benchmark numbers (TTFT, TPOT, ITL, goodput) from request timelines.
  Pages: stage-5/ttft-tpot-throughput, stage-6/benchmark-an-endpoint.
* ``bench.bench_result``: the result file in `vllm bench serve`'s format, and its one reader.
  Pages: stage-6/benchmark-an-endpoint.
* ``bench.fake_server``: a server with known latencies, to check a benchmark client.
  Pages: stage-6/benchmark-an-endpoint.
* ``bench.prompts``: the benchmark's prompts: story slices of exact lengths, and retellings.
  Pages: stage-6/speculative-decoding, stage-9/running-a-serving-engine.
* ``bench.vllm_bench``: `vllm bench serve` as a harness client (needs vLLM installed).
  Pages: stage-6/speculative-decoding, stage-9/running-a-serving-engine.

cli.py, above every layer:

* ``cli``: the `llmserve-ref` command and its subcommands.
  Pages: stage-9/running-a-serving-engine.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

# The release. The version adds the package's content hash to it (`__version__`, below), so
# any change to the package's files is a new version, and the site's wheel a new file name:
# pip replaces an installed package only when the version it is asked for differs.
RELEASE = "0.1.0"
PACKAGE_DIR = Path(__file__).resolve().parent


def package_hash(package: Path = PACKAGE_DIR) -> str:
    """A sha256 of every file of the package (code, tokenizers, weights), by path and bytes,
    ``__pycache__`` aside: what a page's block runs, and what a version names. A source tree
    and the wheel built from it, once installed, hash the same.

    >>> len(package_hash()) == 64 and package_hash() == package_hash(PACKAGE_DIR)
    True
    """
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*"), key=lambda p: p.relative_to(package).parts):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(path.relative_to(package).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


__version__: str  # "0.1.0+g" and 12 hex digits of package_hash(): read it, it is computed


def __getattr__(name: str) -> str:
    """``__version__``, computed on first use (hashing the package takes tens of ms, which an
    import need not pay) and kept: the release and the package's content hash, as PEP 440
    writes a local version. pyproject.toml reads it at build time, so the wheel's name
    carries it too.

    >>> import llmserve_ref
    >>> release, digest = llmserve_ref.__version__.split("+g")
    >>> release == RELEASE, len(digest)
    (True, 12)
    """
    if name == "__version__":
        version = globals()["__version__"] = f"{RELEASE}+g{package_hash()[:12]}"
        return version
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
