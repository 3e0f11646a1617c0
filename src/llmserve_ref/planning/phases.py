"""Prefill, decode, and decode without a cache: the forward passes of a generation, to time.

A generation runs two kinds of forward pass. **Prefill** reads the whole prompt
in one pass and fills the KV cache: its tokens are all known, so they are
computed together, as one matrix per layer. **Decode** computes one new token
per sequence per step, because each token is an input to the next step. A loop
**without** a KV cache has no decode step: to get the token after `context`
tokens it recomputes all of them, `context + 1` tokens per new token.

Each function here returns a call that runs one such pass on a `Llama`, with
its inputs and cache allocated beforehand (by `llmserve_ref.model.forward_step`),
so that timing the call (with `llmserve_ref.planning.measure.interleaved`) times
the pass and nothing else. Token ids are zeros and the cache holds zeros: the
time of a forward pass does not depend on the values, only on the shapes.

>>> import torch
>>> from llmserve_ref.model.llama import Llama
>>> from llmserve_ref.model.llama_config import ModelConfig
>>> model = Llama(ModelConfig(vocab_size=16, hidden_size=16, intermediate_size=32,
...     num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)).to("cpu")
>>> prefill_step(model, batch_size=2, prompt_len=5)().shape
torch.Size([2, 5, 16])
>>> decode_step(model, batch_size=2, context=5)().shape
torch.Size([2, 1, 16])
>>> recompute_step(model, context=5)().shape
torch.Size([1, 6, 16])
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from llmserve_ref.model.forward_step import forward_step
from llmserve_ref.model.llama import Llama


# --8<-- [start:steps]
def prefill_step(model: Llama, batch_size: int, prompt_len: int) -> Callable[[], torch.Tensor]:
    """A call that prefills `batch_size` prompts of `prompt_len` tokens into an empty cache."""
    return forward_step(model, batch_size, context=0, width=prompt_len)


def decode_step(model: Llama, batch_size: int, context: int) -> Callable[[], torch.Tensor]:
    """A call that decodes one token for each of `batch_size` sequences of `context` tokens."""
    return forward_step(model, batch_size, context, width=1)


def recompute_step(model: Llama, context: int) -> Callable[[], torch.Tensor]:
    """`decode_step` without a cache: the same new token, by recomputing all `context + 1`."""
    return forward_step(model, 1, context, width=1, use_cache=False)


# --8<-- [end:steps]
