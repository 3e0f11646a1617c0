"""The benchmark's prompts: exact lengths, fresh slices, and retellings that repeat their story."""

from __future__ import annotations

import numpy as np

from llmserve_ref.bench.prompts import make_prompt, retell_prompts
from llmserve_ref.model.tokenizer import Tokenizer
from llmserve_ref.model.weights import TARGET_DIR

TOKENIZER = Tokenizer.from_file(TARGET_DIR)


def test_a_prompt_has_exactly_the_tokens_asked_and_each_request_its_own_slice():
    rng = np.random.default_rng(0)
    prompts = [make_prompt(n, rng) for n in (1, 7, 32, 32, 200)]
    assert [len(TOKENIZER.encode(p)) for p in prompts] == [1, 7, 32, 32, 200]
    assert prompts[2] != prompts[3]


def test_a_retelling_is_a_story_start_then_the_start_again():
    for prompt in retell_prompts(20, seed=3):
        again = prompt[prompt.rindex(" Once upon a time") :].strip()  # the last 12 tokens
        assert prompt.startswith(again) and len(again.split()) >= 9
        assert 60 <= len(TOKENIZER.encode(prompt)) <= 80  # 59 + 12, give or take a merge
        assert "<|user|>" not in prompt and "<|assistant|>" not in prompt  # no chat markers


def test_every_seed_draws_its_own_stories_and_the_same_seed_the_same():
    assert retell_prompts(5, seed=7) == retell_prompts(5, seed=7)
    drawn = [p for seed in range(1, 41) for p in retell_prompts(32, seed)]
    assert len(set(drawn)) == len(drawn)  # 1,280 prompts, none sent twice
