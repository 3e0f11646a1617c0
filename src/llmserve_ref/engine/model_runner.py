"""The model runner: one forward pass over every scheduled token of every sequence, on paged KV.

The runner owns the model and the `KVStorage` its keys and values live in. Each step
it makes the copy-on-write copies the block manager asked for, packs the scheduled
tokens into one `PagedBatch` (`llmserve_ref.engine.paged_batch`), and runs the model
over it once: the model's own code, on the runner's own copy of the model, which shares
its weights, and whose projections are fused (`llmserve_ref.engine.fused_projections`)
and linear layers, on a CPU with AVX-512, run through oneDNN
(`llmserve_ref.engine.onednn_linear`, which says why only there).

Only the tokens that sample need logits: the last token of a sequence whose
chunk reaches its end, and, for a sequence checking guesses (speculative
decoding), each guess's position too. The others only fill the cache.

>>> import torch
>>> from llmserve_ref.model.llama import Llama
>>> from llmserve_ref.model.llama_config import ModelConfig
>>> _ = torch.manual_seed(0)
>>> model = Llama(ModelConfig(vocab_size=32, hidden_size=32, intermediate_size=64,
...                           num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2))
>>> runner = ModelRunner(model, num_blocks=8, block_size=4)
>>> batch = [Chunk([9], start=5, block_table=[0, 1], samples=True),     # a decode at 5
...          Chunk([5, 6, 7], start=0, block_table=[2], samples=True)]  # a 3-token prompt
>>> runner.forward(batch).shape  # one row of logits per sampling sequence, in batch order
torch.Size([2, 32])
"""

from __future__ import annotations

import copy
import functools
import itertools
from collections.abc import Sequence

import torch

from llmserve_ref.engine.compiled_decode import CompiledDecode
from llmserve_ref.engine.fused_projections import fuse_projections
from llmserve_ref.engine.kv_storage import KVStorage
from llmserve_ref.engine.onednn_linear import pack_linear_layers
from llmserve_ref.engine.paged_batch import Chunk, PagedBatch
from llmserve_ref.kernels.paged_attention import paged_decode_attention
from llmserve_ref.kernels.triton_paged_attention import paged_decode_attention_triton
from llmserve_ref.model.llama import Llama


class ModelRunner:
    """The model and its paged KV storage: runs one packed forward pass per step."""

    def __init__(
        self, model: Llama, num_blocks: int, block_size: int, compile_sizes: Sequence[int] = ()
    ) -> None:
        """`compile_sizes`: run decode steps compiled, padded to these batch sizes, and every
        other step through one graph of any number of tokens
        (`llmserve_ref.engine.compiled_decode`); empty: every step eagerly."""
        # The engine's own copy of the model (`generate` runs the model as it is), sharing
        # its weights, its projections fused and, on a CPU with AVX-512, its linear layers
        # on oneDNN (`onednn_faster`).
        shared = {id(t): t for t in itertools.chain(model.parameters(), model.buffers())}
        self.model = pack_linear_layers(fuse_projections(copy.deepcopy(model, memo=shared)))
        # Compiled: one block more (beyond the KV memory asked for), the padding's scratch.
        self.storage = KVStorage.for_model(
            model.config, num_blocks + bool(compile_sizes), block_size, model.dtype, model.device
        )
        # On CUDA the decode tokens attend with the Triton kernel, which reads the blocks
        # in place, trusting the block manager's tables (checking them would synchronize
        # the GPU on every layer of every step); elsewhere the PyTorch path gathers them.
        cuda = model.device.type == "cuda"
        self.decode_kernel = (
            functools.partial(paged_decode_attention_triton, check=False)
            if cuda
            else paged_decode_attention
        )
        self.compiled = (
            CompiledDecode(self.model, self.storage, compile_sizes, self.decode_kernel)
            if compile_sizes
            else None
        )

    @torch.inference_mode()
    def forward(
        self, chunks: Sequence[Chunk], blocks_to_copy: Sequence[tuple[int, int]] = ()
    ) -> torch.Tensor:
        """Logits ``[num_rows, vocab]`` (float32): for each chunk whose last token samples,
        in the order given, one row per guess and one for its last token.

        `PagedBatch` packs decode tokens first, then the sequences checking guesses, then
        the prompt chunks; the rows come back in the callers' order. The copy-on-write
        copies the block manager asked for are made before anything is written.
        """
        order = sorted(range(len(chunks)), key=lambda i: chunks[i].kind)  # stable
        packed = [chunks[i] for i in order]
        self.storage.copy_blocks(list(blocks_to_copy))
        if self.compiled and (size := self.compiled.size_for(packed)):  # decode, padded
            batch = self.compiled.pad(packed, size)
            hidden = self.compiled.hidden_states(batch)[0]  # [size, hidden]
        elif self.compiled:  # prompt chunks, guesses, or many sequences: the dynamic graph
            batch = PagedBatch(packed, self.storage, self.decode_kernel)
            hidden = self.compiled.any_step(batch)[0]  # [num_tokens, hidden]
        else:
            batch = PagedBatch(packed, self.storage, self.decode_kernel)
            hidden = self.model.hidden_states(batch.input_ids, batch)[0]  # [num_tokens, hidden]
        logits = self.model.compute_logits(hidden[batch.logits_indices]).float()
        if order == list(range(len(chunks))):
            return logits
        rows = [1 + c.num_guesses if c.samples else 0 for c in packed]  # each one's logits
        first = list(itertools.accumulate(rows, initial=0))  # packed chunk k's first row
        at = {i: k for k, i in enumerate(order)}  # chunk i is packed k-th
        return logits[[first[at[i]] + j for i in range(len(chunks)) for j in range(rows[at[i]])]]
