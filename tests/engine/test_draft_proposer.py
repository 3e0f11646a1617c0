"""The draft model's proposer: its guesses are its own, read from KV paged beside the target's.

The oracle is the draft model run alone (`generate`, with a dense cache of its own): in a
busy engine, through prefix-cache hits, preemptions, chunked prompts, forks and rollbacks,
every list of guesses must be what the draft alone continues that text with. Output
exactness with the draft guessing is tested beside prompt lookup's, in
`test_speculative_engine.py`.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from test_speculative_engine import (  # the engine tests' fixtures and helpers
    GREEDY,
    draft,
    forks_of,
    prompts,
    requests_for,
    rollback_holds,
    run,
    target,
)

from llmserve_ref.engine.draft_proposer import UNDRAFTED, DraftProposer
from llmserve_ref.engine.engine_core import EngineCore
from llmserve_ref.engine.scheduler_config import SchedulerConfig
from llmserve_ref.model.generate import generate

__all__ = ["draft", "prompts", "target"]  # fixtures, used by name


def test_a_sequence_asks_for_room_and_the_draft_fills_it(draft):
    drafter = DraftProposer(draft, num_blocks=8, block_size=16, num_speculative_tokens=3)
    assert drafter.propose([0, 5, 6]) == [UNDRAFTED] * 3
    with pytest.raises(ValueError, match="at least 1"):
        DraftProposer(draft, 8, 16, 0)


def recorded_guesses(drafter: DraftProposer) -> list[tuple[list[int], list[int]]]:
    """From now on, each step's (token ids, guesses) of every speculating sequence."""
    seen: list[tuple[list[int], list[int]]] = []
    fill = drafter.draft

    def draft_and_record(out, running):
        fill(out, running)
        for request_id, guesses in out.scheduled_spec_decode_tokens.items():
            seen.append((list(out.scheduled[request_id].token_ids), list(guesses)))

    drafter.draft = draft_and_record
    return seen


def each_is_its_own_continuation(draft, seen: list[tuple[list[int], list[int]]]) -> None:
    """Every list of guesses is what `draft` alone, greedily, continues its text with."""
    for token_ids, guesses in seen:
        assert guesses == list(generate(draft, token_ids, GREEDY, len(guesses))), token_ids


@pytest.mark.parametrize("scene", ["prefix-hits-preemption-chunks", "forks"])
def test_the_drafts_guesses_are_its_own_greedy_continuation(target, draft, prompts, scene):
    """The draft's paged KV holds what its own dense cache would: every guess list equals
    what `generate` with the draft model alone continues the sequence's text with, through
    prefix-cache hits (the draft reads KV it wrote for another request), preemptions
    (rewritten), prompts chunked beside guesses, forks (copied on write) and rollbacks."""
    model, _ = target
    if scene == "forks":
        config = SchedulerConfig(token_budget=64, max_num_seqs=8, block_size=8, num_blocks=256)
        requests = forks_of(prompts[2][:61])
    else:
        config = SchedulerConfig(
            token_budget=40, max_num_seqs=8, block_size=8, num_blocks=36, watermark=0.0
        )
        shared = prompts[0][:32]
        requests = requests_for([shared + p[1:20] for p in prompts[:10]], GREEDY, 40)
    drafter = DraftProposer(draft, config.num_blocks, config.block_size, 4)
    seen = recorded_guesses(drafter)
    core = EngineCore(model, config, proposer=drafter)
    run(core, requests, rollback_holds)
    bm = core.scheduler.block_manager
    if scene == "forks":
        assert core.spec_decoding.num_accepted_tokens < core.spec_decoding.num_draft_tokens
    else:
        assert bm.num_hits > 0 and core.scheduler.num_preemptions > 0
    assert len(seen) > 50
    each_is_its_own_continuation(draft, seen)


def test_a_block_cached_after_every_guess_passed_holds_the_drafts_kv_of_the_last(target):
    """The target as its own draft: every guess passes, so each decode step emits 4 tokens
    (3 guesses and one more) and ends on a block of 4; the request ends on such a step, its
    last guess's block enters the prefix cache, and a request that continues its text from
    there gets guesses from KV the draft wrote, not from a slot nobody wrote."""
    model, tokenizer = target
    config = SchedulerConfig(token_budget=64, max_num_seqs=4, block_size=4, num_blocks=64)
    drafter = DraftProposer(model, config.num_blocks, config.block_size, 3)
    # Garbage in every slot nobody wrote (fresh storage is zeros, which attention barely sees).
    drafter.runner.storage.data.normal_(0.0, 10.0, generator=torch.Generator().manual_seed(0))
    core = EngineCore(model, config, proposer=drafter)
    prompt = tokenizer.encode("Once upon a time, there was", add_bos=True)[:8]
    first = run(core, requests_for([prompt], GREEDY, 9))["0"]
    spec = core.spec_decoding
    assert spec.num_accepted_tokens == spec.num_draft_tokens == 6 and core.num_steps == 3
    text = prompt + [o.token_id for o in first]  # 17 tokens: 16 of them in cached blocks
    seen = recorded_guesses(drafter)
    run(core, [dataclasses.replace(requests_for([text], GREEDY, 5)[0], request_id="again")])
    assert core.scheduler.block_manager.num_hits >= 16 and seen
    each_is_its_own_continuation(model, seen)
