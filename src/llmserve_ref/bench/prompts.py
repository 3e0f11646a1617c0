"""The benchmark's prompts, cut from the project's held-out stories with the tiny models'
tokenizer.

`make_prompt` is the shape of `vllm bench serve --dataset-name random`: an exact number of
tokens, a different slice for every request. `retell_prompts` are prompts whose answers
repeat them, what speculative decoding's prompt lookup (vLLM's ``ngram``) can guess from.
Against another model the token counts are close, and a server's usage reports the true ones.
"""

from __future__ import annotations

import functools
import random

import numpy as np

from llmserve_ref.model import corpus
from llmserve_ref.model.tokenizer import Tokenizer
from llmserve_ref.model.weights import TARGET_DIR


@functools.cache
def _corpus_ids() -> tuple[Tokenizer, np.ndarray]:
    tokenizer = Tokenizer.from_file(TARGET_DIR)
    ids = tokenizer.encode(" ".join(corpus.heldout_documents(200)))
    special = {tokenizer.bos_id, tokenizer.eos_id, tokenizer.user_id, tokenizer.assistant_id}
    return tokenizer, np.array([i for i in ids if i not in special])


def make_prompt(num_tokens: int, rng: np.random.Generator) -> str:
    """A slice of `num_tokens` tokens of held-out story text, from a random place.

    Every request gets a different slice, so a server's prefix cache cannot make
    the benchmark faster than real traffic would be.

    >>> tokenizer, _ = _corpus_ids()
    >>> len(tokenizer.encode(make_prompt(50, np.random.default_rng(0))))
    50
    """
    tokenizer, ids = _corpus_ids()
    start = int(rng.integers(0, len(ids) - num_tokens))
    return tokenizer.decode(ids[start : start + num_tokens].tolist())


def retell_prompts(count: int, seed: int) -> list[str]:
    """`count` prompts that the model answers by repeating them: a story's first 59 tokens,
    then its first 12 again, so that having read how the story starts, the model tells it
    again. That is text prompt lookup (speculative decoding's ``ngram``) can guess from.

    The stories (stories only: no chat turn, whose markers our server stops at and vLLM
    does not) come from the corpus's generator seeded by the held-out split's seed plus
    `seed`, so that runs with different seeds send different prompts, as the benchmark
    harness needs:

    >>> first = retell_prompts(1, seed=1)[0]
    >>> print(first[:54])
    Once upon a time, there was a quiet dragon named Finn.
    >>> print(first[-60:])
    to find his Once upon a time, there was a quiet dragon named
    >>> retell_prompts(1, seed=2) != [first]
    True
    """
    tokenizer, _ = _corpus_ids()
    rng = random.Random(corpus.HELDOUT_SEED + seed)
    stories = [corpus.story(rng) for _ in range(count)]
    return [
        tokenizer.decode(tokenizer.encode(s)[:59] + tokenizer.encode(" " + s)[:12]) for s in stories
    ]
