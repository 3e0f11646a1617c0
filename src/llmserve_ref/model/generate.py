"""The generation loop: prefill the prompt once, then decode one token per step.

Autoregressive generation is a loop. The first forward pass reads the whole
prompt (prefill) and fills the KV cache; its last position's logits give the
first new token. Each later step feeds only the newest token (decode), which
attends to everything in the cache. The samplers turn logits into a token; the
loop stops at a stop token or after `max_new_tokens`.

`generate` is a Python generator: it yields each token id the moment it is
chosen, which is what lets a server stream tokens to a client. A stop token is
yielded too (so the caller can tell why it ended) and then the loop ends.
It serves one sequence; batching is the scheduler's job on later pages.

>>> import torch
>>> from llmserve_ref.model.llama import Llama
>>> from llmserve_ref.model.llama_config import ModelConfig
>>> _ = torch.manual_seed(0)
>>> model = Llama(ModelConfig(vocab_size=16, hidden_size=16, intermediate_size=32,
...     num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)).to("cpu")
>>> tokens = list(generate(model, [1, 2, 3], SamplingParams(temperature=0), max_new_tokens=5))
>>> len(tokens)
5
>>> tokens == list(generate(model, [1, 2, 3], SamplingParams(temperature=0), max_new_tokens=5))
True
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence

import torch

from llmserve_ref.model.llama import Llama
from llmserve_ref.model.sampling import SamplingParams, next_token


# --8<-- [start:generate]
@torch.inference_mode()
def generate(
    model: Llama,
    prompt_ids: Sequence[int],
    params: SamplingParams | None = None,
    max_new_tokens: int = 64,
    stop_token_ids: Collection[int] = (),
    generator: torch.Generator | None = None,
) -> Iterator[int]:
    """Yield up to `max_new_tokens` token ids that continue `prompt_ids`.

    Sampling uses `generator`, or a fresh one seeded with ``params.seed`` (on the
    model's device), or torch's global generator if neither is given. With
    ``params.temperature == 0`` the choice is greedy and no randomness is used.
    """
    params = params or SamplingParams()
    config = model.config
    check_prompt(prompt_ids, max_new_tokens, config.max_position_embeddings, config.vocab_size)
    # The last new token is yielded but never fed back, so it needs no position.
    positions = len(prompt_ids) + max_new_tokens - 1
    device = model.device
    if generator is None and params.seed is not None:
        generator = torch.Generator(device=device).manual_seed(params.seed)

    prompt = torch.tensor([list(prompt_ids)], device=device)
    cache = model.make_cache(batch_size=1, max_len=positions)
    logits = model(prompt, cache)[:, -1]  # prefill: the whole prompt in one pass
    output: list[int] = []
    while True:
        token = next_token(logits, params, prompt_ids, output, generator, stop_token_ids)
        output.append(token)
        yield token
        if token in stop_token_ids or len(output) == max_new_tokens:
            return
        logits = model(torch.tensor([[token]], device=device), cache)[:, -1]  # decode


# --8<-- [end:generate]


def check_prompt(prompt_ids: Sequence[int], max_tokens: int, max_len: int, vocab_size: int) -> None:
    """Refuse a request no model can continue, with what to change.

    The one home of these checks, for `generate`, speculative decoding and the
    engines: the prompt must be non-empty, its ids in the vocabulary, at least one
    new token asked for, and prompt plus `max_tokens` within `max_len` tokens (vLLM's
    rule for ``max_model_len``).
    """
    if not prompt_ids:
        raise ValueError("the prompt is empty: start it with at least the <|bos|> token")
    outside = [t for t in prompt_ids if not 0 <= t < vocab_size]
    if outside:
        raise ValueError(
            f"prompt token ids {outside} are outside the vocabulary [0, {vocab_size}); "
            "encode the prompt with the model's own tokenizer"
        )
    if max_tokens < 1:
        raise ValueError(f"max_tokens (new tokens to generate) must be >= 1, got {max_tokens}")
    if len(prompt_ids) + max_tokens > max_len:
        raise ValueError(
            f"{len(prompt_ids)} prompt tokens + {max_tokens} max_tokens exceed the maximum "
            f"model length of {max_len} positions; shorten the prompt or max_tokens"
        )
