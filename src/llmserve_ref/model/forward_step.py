"""One forward pass of a `Llama`, ready to be called again and again: the thing to time.

Timing a prefill, a decode step or a speculative verification means timing one
forward pass of some new tokens after some cached ones, and nothing else. So
`forward_step` allocates the inputs and the KV cache beforehand and returns a
call that resets the cache to `context` filled positions and runs the pass: every
call does the same work, forever. Token ids are zeros and the cache holds
zeros: the time of a forward pass depends on the shapes, not on the values.
This is the one home of these passes; the prefill / decode / recompute steps of
`llmserve_ref.planning.phases`, the decode steps of `llmserve_ref.planning.measure`
and the verification widths of `llmserve_ref.engine.speculative` are built here.

>>> import torch
>>> from llmserve_ref.model.llama import Llama
>>> from llmserve_ref.model.llama_config import ModelConfig
>>> model = Llama(ModelConfig(vocab_size=16, hidden_size=16, intermediate_size=32,
...     num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)).to("cpu")
>>> step = forward_step(model, batch_size=2, context=5, width=3)
>>> step().shape, step().shape  # three new tokens after five cached, at every call
(torch.Size([2, 3, 16]), torch.Size([2, 3, 16]))
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from llmserve_ref.model.llama import Llama


# --8<-- [start:forward_step]
def forward_step(
    model: Llama, batch_size: int, context: int, width: int, use_cache: bool = True
) -> Callable[[], torch.Tensor]:
    """A call that runs `width` new tokens of `batch_size` sequences after `context` cached.

    Without `use_cache` there is nothing cached to attend to, so the call feeds all
    ``context + width`` tokens (what a loop without a KV cache recomputes per token).
    """
    positions = context + width
    if batch_size < 1 or width < 1 or context < 0:
        raise ValueError(
            f"batch_size and width must be >= 1 and context >= 0, got {batch_size}, {width} "
            f"and {context}"
        )
    if positions > model.config.max_position_embeddings:
        raise ValueError(
            f"{positions} positions needed but the model's max_position_embeddings is "
            f"{model.config.max_position_embeddings}; use a shorter context"
        )
    fed = width if use_cache else positions
    tokens = torch.zeros(batch_size, fed, dtype=torch.long, device=model.device)
    cache = model.make_cache(batch_size, positions) if use_cache else None

    @torch.inference_mode()
    def step() -> torch.Tensor:
        if cache is None:
            return model(tokens)
        cache.truncate(0)
        cache.advance(context)  # `context` positions count as filled; the pass adds `width`
        return model(tokens, cache)

    return step


# --8<-- [end:forward_step]
