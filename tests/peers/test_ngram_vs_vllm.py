"""Prompt lookup proposes what vLLM 0.32's own `NgramProposer` proposes, on random token lists.

vLLM's proposer (numba, batched) is built from the four settings it reads of its config and
asked, as its model runner asks it, for every sequence of a batch at once; ours answers one
sequence at a time. Small alphabets make n-grams repeat, so most lists get a guess; lists
that fill the context, or are shorter than the n-gram, check the cases that get none.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from llmserve_ref.engine.ngram_proposer import NgramProposer

from . import servers

if not servers.HAVE_VLLM:
    pytest.skip(servers.NEEDS_VLLM, allow_module_level=True)

from vllm.v1.spec_decode import ngram_proposer as vllm_ngram


def vllms(lo: int, hi: int, k: int, max_model_len: int) -> vllm_ngram.NgramProposer:
    config = SimpleNamespace(
        speculative_config=SimpleNamespace(
            prompt_lookup_min=lo, prompt_lookup_max=hi, num_speculative_tokens=k
        ),
        model_config=SimpleNamespace(max_model_len=max_model_len),
        scheduler_config=SimpleNamespace(max_num_seqs=256),
        parallel_config=SimpleNamespace(tensor_parallel_size=1),
    )
    return vllm_ngram.NgramProposer(config)


@pytest.mark.parametrize(
    ("lo", "hi", "k", "max_model_len"),
    [(1, 1, 1, 64), (1, 3, 4, 64), (2, 4, 5, 64), (3, 5, 8, 40), (1, 8, 3, 64), (4, 4, 2, 64)],
)
def test_our_proposals_are_vllms(lo, hi, k, max_model_len):
    rng = np.random.default_rng([lo, hi, k, max_model_len])
    lists = [
        rng.integers(0, rng.integers(2, 6), size=rng.integers(1, max_model_len + 1))
        for _ in range(200)
    ]
    token_ids = np.zeros((len(lists), max_model_len), dtype=np.int32)
    for i, tokens in enumerate(lists):
        token_ids[i, : len(tokens)] = tokens
    lengths = np.array([len(tokens) for tokens in lists], dtype=np.int32)
    # Every sequence sampled a token last step (vLLM skips those that did not: prefill chunks).
    theirs = vllms(lo, hi, k, max_model_len).propose(k, [[0]] * len(lists), lengths, token_ids)
    ours = NgramProposer(lo, hi, k, max_model_len)
    assert [ours.propose(tokens.tolist()) for tokens in lists] == theirs
    guessed = sum(bool(guess) for guess in theirs)
    assert len(lists) // 5 < guessed < len(lists), guessed  # both kinds of case were checked
