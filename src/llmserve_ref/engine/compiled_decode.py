"""The forward, compiled: a graph per decode batch size (steps padded up), one for any step.

Run eagerly, a decode step of the tiny model is a few hundred small PyTorch ops, each
dispatched from Python: at one sequence most of the step is that dispatch, not
arithmetic (`benchmarks/profile_engine.py` splits it by op family). `torch.compile`
traces the forward once and inductor generates kernels (C++ on a CPU) that fuse the
elementwise ops (norms, RoPE, SiLU, the attention mask), called from a generated Python
wrapper. vLLM compiles when it starts (on a GPU it also captures CUDA graphs for a list
of batch sizes; ``--enforce-eager`` turns both off); ``llmserve-ref serve --compile``
turns it on.

Each graph is compiled for fixed shapes, and the number of sequences changes every step.
So, as vLLM on a GPU pads a step up to its next CUDA graph's batch size, a decode step
of n sequences (n tokens) is padded up to the next of the `sizes` (with
`EngineConfig.compile_sizes`, 7 rows at most): each padding row is token 0 at position
0, whose key and value go to a scratch block no sequence owns (the storage's last) and
whose output nobody reads. The block tables' width (the longest sequence's blocks)
stays dynamic, so that one graph per size serves every length; it is at least 2, since
PyTorch specializes a dimension of size 1 into a graph of its own. `KVStorage.write`
indexes the storage itself, not a view of it, so that the graph writes the cache in place.

Every other step (prompt chunks, guesses, or more sequences than the largest size, which
`EngineConfig.compile_sizes` never leaves) runs through one more graph, compiled as vLLM's
CPU build compiles its forward pass (one trace, inductor): the number of tokens is a
dynamic dimension, and attention is an op the graph calls out to (`paged_attend` here,
`unified_attention_with_output` in vLLM), which runs the step's `PagedBatch` eagerly: its
attention differs from step to step in ways a graph cannot fix (how many sequences decode,
check guesses or read a prompt, each prompt's length), while everything around it (norms,
RoPE, SiLU, the projections) depends on the tokens alone. Each step chooses: a decode
graph if one fits, else the dynamic one.

>>> import torch
>>> from llmserve_ref.engine.kv_storage import KVStorage
>>> from llmserve_ref.model.llama import Llama
>>> from llmserve_ref.model.llama_config import ModelConfig
>>> config = ModelConfig(vocab_size=32, hidden_size=32, intermediate_size=64,
...                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
>>> storage = KVStorage.for_model(config, num_blocks=9, block_size=4)  # 8 and a scratch block
>>> graphs = CompiledDecode(Llama(config), storage, sizes=[1, 2, 4, 16])
>>> decode = Chunk([3], start=5, block_table=[0, 1], samples=True)
>>> [graphs.size_for([decode] * n) for n in (2, 3, 15, 17)]  # 3 run as 4; 17: the dynamic graph
[2, 4, 16, None]
>>> graphs.pad([decode] * 3, 4).input_ids.tolist()  # a padding row: token 0, to the scratch block
[[3, 3, 3, 0]]
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence

import torch

from llmserve_ref.engine.kv_storage import KVStorage
from llmserve_ref.engine.paged_batch import Chunk, PagedBatch
from llmserve_ref.kernels.paged_attention import paged_decode_attention
from llmserve_ref.model.llama import Llama

_steps: list[PagedBatch] = []  # the batch the dynamic graph runs now (vLLM: "forward context")


@contextlib.contextmanager
def running(batch: PagedBatch) -> Iterator[None]:
    """`batch` is the one `paged_attend` attends with while the graph runs."""
    _steps.append(batch)
    try:
        yield
    finally:
        _steps.pop()


@torch.library.custom_op("llmserve_ref::paged_attend", mutates_args=())
def paged_attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: int) -> torch.Tensor:
    """`PagedBatch.attend` of the running batch, as one op: the graph calls it and does not
    look inside (it writes the keys and values to the storage, which the graph never reads).
    ``[1, heads, num_tokens, head_dim]`` in and out, the output contiguous."""
    batch = _steps[-1]
    return batch.attend(layer, q, k, v, batch.positions(q.shape[2])).contiguous()


@paged_attend.register_fake
def _(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: int) -> torch.Tensor:
    return q.new_empty(q.shape)


class _AnyStep:
    """The `KVStore` the dynamic graph sees: the step's positions, and attention by op."""

    def __init__(self, positions: torch.Tensor) -> None:
        self._positions = positions

    def positions(self, num_tokens: int) -> torch.Tensor:
        return self._positions

    def attend(
        self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor
    ) -> torch.Tensor:
        return paged_attend(q, k, v, layer)


class CompiledDecode:
    """The model's decode forward compiled once per size in `sizes`, and once with any
    number of tokens for every other step; `storage`'s last block is the padding rows'
    scratch block."""

    def __init__(
        self,
        model: Llama,
        storage: KVStorage,
        sizes: Sequence[int],
        decode_kernel: Callable[..., torch.Tensor] = paged_decode_attention,
    ) -> None:
        self.sizes = sorted(sizes)
        self.storage, self.decode_kernel = storage, decode_kernel
        scratch = storage.num_blocks - 1
        self.padding = Chunk([0], start=0, block_table=[scratch], samples=False)
        # One graph per size, of a function whose graphs dynamo counts per process (the
        # same code, whatever the model): past its limit (8 by default) it runs eagerly.
        torch._dynamo.config.recompile_limit += len(self.sizes) + 1  # and the dynamic graph
        self._hidden_states = torch.compile(model.hidden_states, dynamic=False)
        self._any_step = torch.compile(model.hidden_states)
        # After `warm_up`, a step that would need a new graph runs eagerly instead: a
        # request never waits seconds for a compile (a test sets "fail_on_recompile").
        self.stance = "default"

    # --8<-- [start:pad]
    def size_for(self, chunks: Sequence[Chunk]) -> int | None:
        """The size a step runs at, or None (the dynamic graph, `any_step`): it has a prompt
        chunk or guesses, or is too big."""
        if not all(c.is_decode for c in chunks):
            return None
        return next((size for size in self.sizes if size >= len(chunks)), None)

    def pad(self, chunks: Sequence[Chunk], size: int) -> PagedBatch:
        """The step's batch, padded to `size` rows."""
        padded = [*chunks, *[self.padding] * (size - len(chunks))]
        batch = PagedBatch(padded, self.storage, self.decode_kernel, min_table_width=2)
        torch._dynamo.maybe_mark_dynamic(batch.block_tables, 1)  # any sequence length
        return batch

    def hidden_states(self, batch: PagedBatch) -> torch.Tensor:
        """The compiled `Llama.hidden_states` of a padded batch: ``[1, size, hidden]``."""
        with torch.compiler.set_stance(self.stance):
            return self._hidden_states(batch.input_ids, batch)

    # --8<-- [end:pad]

    def any_step(self, batch: PagedBatch) -> torch.Tensor:
        """The dynamic graph's `Llama.hidden_states` of any step: ``[1, num_tokens, hidden]``."""
        ids, positions = batch.input_ids, batch.positions(batch.input_ids.shape[1])
        torch._dynamo.maybe_mark_dynamic(ids, 1)  # any number of tokens
        torch._dynamo.maybe_mark_dynamic(positions, 0)
        with torch.compiler.set_stance(self.stance), running(batch):
            return self._any_step(ids, _AnyStep(positions))

    @torch.inference_mode()  # as the engine core runs: a graph compiled outside is another
    def warm_up(self) -> float:
        """Compile every size now (a step of padding rows each), and the dynamic graph (a
        two-token prompt into the scratch block), not at a request's first step; returns the
        seconds it took (seconds each, cold; much less from the cache)."""
        started = time.perf_counter()
        for size in self.sizes:
            self.hidden_states(self.pad([], size))
        prompt = Chunk([0, 0], start=0, block_table=[self.padding.block_table[0]], samples=False)
        self.any_step(PagedBatch([prompt], self.storage, self.decode_kernel))
        self.stance = "eager_on_recompile"
        return time.perf_counter() - started
