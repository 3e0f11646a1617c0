"""The paged, batched forward pass gives what the model gives each request alone.

The oracle is `generate`: one sequence, a contiguous `KVCache`, no scheduler. The engine
core packs prefill chunks and decode tokens of many sequences into one forward pass over
paged KV, shares cached prefixes, forks `n > 1` samples and preempts when blocks run out;
none of that may change a token. Where float32 rounding in a different summation order
flips a near-tie between the top two logits, the test checks that it was a near-tie
(gap below 1e-4) instead of demanding the same token.
"""

from __future__ import annotations

import dataclasses
import random

import pytest
import torch

from llmserve_ref.engine.draft_proposer import DraftProposer
from llmserve_ref.engine.engine_core import EngineCore, generate_batch
from llmserve_ref.engine.interface import EngineRequest
from llmserve_ref.engine.request import RequestStatus
from llmserve_ref.engine.scheduler_config import SchedulerConfig
from llmserve_ref.model import corpus
from llmserve_ref.model.generate import generate
from llmserve_ref.model.llama import Llama
from llmserve_ref.model.sampling import SamplingParams
from llmserve_ref.model.weights import load_draft, load_target

GREEDY = SamplingParams(temperature=0)
NEAR_TIE = 1e-4


@pytest.fixture(scope="module")
def target():
    return load_target("cpu")


@pytest.fixture(scope="module")
def prompts(target):
    """16 prompts of 1 to 120 tokens: prefixes of held-out stories."""
    _, tokenizer = target
    rng = random.Random(0)
    docs = corpus.heldout_documents(16)
    return [tokenizer.encode(d, add_bos=True)[: rng.randint(1, 120)] for d in docs]


@pytest.fixture(scope="module")
def greedy_reference(target, prompts):
    """What `generate` gives each prompt alone: 32 greedy tokens."""
    return reference(target[0], prompts, 32)


def assert_same_greedy(model, prompt: list[int], ours: list[int], reference: list[int]) -> None:
    """Token for token, except at a near-tie, after which the two continuations differ."""
    for i, (a, b) in enumerate(zip(ours, reference, strict=True)):
        if a != b:
            with torch.inference_mode():
                logits = model(torch.tensor([prompt + reference[:i]]))[0, -1]
            top2 = logits.topk(2)
            gap = float(top2.values[0] - top2.values[1])
            assert gap < NEAR_TIE and a in top2.indices.tolist(), (
                f"token {i} differs: ours {a}, generate {b}, top-2 gap {gap:.2e}"
            )
            return


def reference(model, prompts, max_tokens, params=GREEDY):
    return [list(generate(model, p, params, max_new_tokens=max_tokens)) for p in prompts]


@pytest.mark.parametrize(
    ("token_budget", "block_size"),
    [(512, 16), (37, 1), (24, 8)],
    ids=["whole-prompts", "block-size-1", "chunked-odd-budget"],
)
def test_a_mixed_batch_gives_each_prompt_what_generate_gives_it_alone(
    target, prompts, greedy_reference, token_budget, block_size
):
    model, _ = target
    config = SchedulerConfig(
        token_budget=token_budget,
        max_num_seqs=16,
        block_size=block_size,
        num_blocks=4096 // block_size,
    )
    core = EngineCore(model, config)
    ours = generate_batch(core, prompts, GREEDY, max_tokens=32)
    for prompt, a, b in zip(prompts, ours, greedy_reference, strict=True):
        assert_same_greedy(model, prompt, a, b)
    assert core.scheduler.block_manager.num_used_blocks == 0


@pytest.mark.slow  # compiles six graphs of the tiny model (seconds each, cold)
def test_compiled_decode_steps_give_every_token_generate_gives(
    target, prompts, greedy_reference, monkeypatch
):
    """With the decode step compiled (`llmserve-ref serve --compile`), token for token:
    here a near-tie flip would fail, as the issue that brought compilation asks."""
    model, _ = target
    config = SchedulerConfig(token_budget=256, max_num_seqs=16, block_size=16, num_blocks=256)
    core = EngineCore(model, config, compile_sizes=[1, 2, 4, 8, 16])
    graphs = core.runner.compiled
    sizes = []  # the size of every step that ran compiled
    run = graphs.hidden_states
    monkeypatch.setattr(graphs, "hidden_states", lambda b: sizes.append(b.num_decodes) or run(b))
    ours = generate_batch(core, prompts, GREEDY, max_tokens=32)
    assert ours == greedy_reference
    assert 16 in sizes and len(sizes) > 10  # at least the steps of all 16 sequences


def test_prefix_caching_and_preemption_change_no_token(target, prompts):
    # A shared 48-token system prefix, a pool so small that requests are preempted, and
    # requests arriving while others decode: hits, copies, evictions, recomputes.
    model, _ = target
    system = prompts[3][:48] if len(prompts[3]) >= 48 else (prompts[3] * 48)[:48]
    batch = [system + p[1:12] for p in prompts[:10]]
    config = SchedulerConfig(
        token_budget=48, max_num_seqs=8, block_size=8, num_blocks=40, watermark=0.0
    )
    core = EngineCore(model, config)
    outputs: dict[str, list[int]] = {}
    for i, prompt in enumerate(batch[:6]):
        core.add_request(EngineRequest(prompt, GREEDY, 40, request_id=str(i)))
    steps = 0
    while not core.idle or len(outputs) < len(batch):
        if steps == 5:
            for i, prompt in enumerate(batch[6:], start=6):
                core.add_request(EngineRequest(prompt, GREEDY, 40, request_id=str(i)))
        for out in core.step():
            outputs.setdefault(out.request_id, []).append(out.token_id)
        steps += 1
    bm = core.scheduler.block_manager
    assert core.scheduler.num_preemptions > 0 and bm.num_hits > 0
    for i, prompt in enumerate(batch):
        assert_same_greedy(model, prompt, outputs[str(i)], reference(model, [prompt], 40)[0])
    assert bm.num_used_blocks == 0


def test_a_seeded_request_samples_the_same_text_alone_and_among_fifteen_others(target, prompts):
    model, _ = target
    params = [SamplingParams(temperature=0.9, top_p=0.95, seed=s) for s in range(16)]
    config = SchedulerConfig(token_budget=64, max_num_seqs=16, block_size=16, num_blocks=256)
    together = generate_batch(EngineCore(model, config), prompts, params, max_tokens=24)
    for i in (0, 5):
        alone = generate_batch(EngineCore(model, config), [prompts[i]], [params[i]], 24)
        assert together[i] == alone[0]
        # and what `generate` draws with the same seed
        assert together[i] == reference(model, [prompts[i]], 24, params[i])[0]


def test_n_samples_share_the_prompt_blocks_and_copy_the_partial_one(target, prompts):
    model, _ = target
    prompt = prompts[2][:21]  # 21 tokens: two full blocks of 8 and a partial one
    config = SchedulerConfig(token_budget=64, max_num_seqs=8, block_size=8, num_blocks=64)
    core = EngineCore(model, config)
    seeds = [10, 11, 12, 13]
    for i, seed in enumerate(seeds):
        fork_of = None if i == 0 else "0"
        params = SamplingParams(temperature=1.0, seed=seed)
        core.add_request(EngineRequest(prompt, params, 12, request_id=str(i), fork_of=fork_of))
    first = core.step()  # one prefill for all four
    assert core.num_scheduled_tokens == 21 and len(first) == 4
    bm = core.scheduler.block_manager
    tables = [bm.table(str(i)) for i in range(4)]
    assert all(t == tables[0] for t in tables) and bm.blocks[tables[0][0]].ref_count == 4
    outputs = {o.request_id: [o.token_id] for o in first}
    second = core.step()  # everyone writes position 21: the partial block is copied for 3
    assert len({bm.table(str(i))[2] for i in range(4)}) == 4
    assert len({bm.table(str(i))[0] for i in range(4)}) == 1  # full blocks still shared
    for o in second:
        outputs[o.request_id].append(o.token_id)
    while not core.idle:
        for o in core.step():
            outputs[o.request_id].append(o.token_id)
    for i, seed in enumerate(seeds):  # each sample is what `generate` draws with its seed
        params = SamplingParams(temperature=1.0, seed=seed)
        assert outputs[str(i)] == reference(model, [prompt], 12, params)[0]


def test_abort_frees_blocks_at_once_and_its_waiting_forks_go_on_alone(target, prompts):
    model, _ = target
    config = SchedulerConfig(token_budget=64, max_num_seqs=8, block_size=8, num_blocks=64)
    core = EngineCore(model, config)
    core.add_request(EngineRequest(prompts[0], GREEDY, 20, request_id="a"))
    core.step()
    used = core.scheduler.block_manager.num_used_blocks
    assert used > 0
    core.abort("a")
    assert core.scheduler.block_manager.num_used_blocks == 0
    core.add_request(EngineRequest(prompts[1], GREEDY, 5, request_id="p"))
    core.add_request(EngineRequest(prompts[1], GREEDY, 5, request_id="c", fork_of="p"))
    core.abort("p")  # before its first token: the fork is queued on its own
    outputs = [o for _ in range(20) for o in core.step()]
    assert [o.request_id for o in outputs] == ["c"] * 5 and outputs[-1].finish_reason == "length"


def test_abort_of_an_unknown_id_does_nothing_and_forks_give_their_seats_back(target, prompts):
    model, _ = target
    config = SchedulerConfig(token_budget=64, max_num_seqs=8, block_size=8, num_blocks=64)
    core = EngineCore(model, config)
    core.add_request(EngineRequest(prompts[1], GREEDY, 5, request_id="p"))
    for fork in ("c", "d"):
        core.add_request(EngineRequest(prompts[1], GREEDY, 5, request_id=fork, fork_of="p"))
    parent = core.sequences["p"].request
    assert core.request_ids() == ["p", "c", "d"] and parent.n == 3  # a seat for each fork
    core.abort("nobody")
    assert core.request_ids() == ["p", "c", "d"]
    core.abort("p")
    assert core.request_ids() == ["c", "d"] and parent.n == 1


def test_a_request_becomes_a_fork_only_of_a_parent_it_can_share_with(target, prompts):
    """The same prompt and max_tokens, a parent that has not sampled, and a seat for it (a
    waiting parent takes its forks' seats when admitted): else it is scheduled alone."""
    model, _ = target
    prompt = prompts[2][:21]

    def core_with(max_num_seqs: int, token_budget: int = 64) -> EngineCore:
        config = SchedulerConfig(
            token_budget=token_budget, max_num_seqs=max_num_seqs, block_size=8, num_blocks=64
        )
        return EngineCore(model, config)

    def joins(core: EngineCore, request_id: str, ids=prompt, max_tokens: int = 5) -> bool:
        core.add_request(EngineRequest(ids, GREEDY, max_tokens, request_id=request_id, fork_of="p"))
        return request_id in [f.request_id for f in core.sequences["p"].forks]

    core = core_with(max_num_seqs=3)
    core.add_request(EngineRequest(prompt, GREEDY, 5, request_id="p"))
    assert not joins(core, "another prompt", ids=prompt[:-1])
    assert not joins(core, "another limit", max_tokens=6)
    assert joins(core, "c1") and joins(core, "c2")  # p takes three seats: all there are
    assert not joins(core, "c3")
    core.step()  # p samples its first token
    assert not joins(core, "late")

    core = core_with(max_num_seqs=2)  # two short requests run and take every seat...
    for request_id in ("r1", "r2"):
        core.add_request(EngineRequest(prompts[3][:4], GREEDY, 5, request_id=request_id))
    core.step()
    assert core.scheduler.num_seats == 2
    core.add_request(EngineRequest(prompt, GREEDY, 5, request_id="p"))
    assert joins(core, "c")  # ...but p waits: it takes its fork's seat once admitted

    core = core_with(max_num_seqs=2, token_budget=8)
    core.add_request(EngineRequest(prompts[3][:4], GREEDY, 5, request_id="r"))
    core.add_request(EngineRequest(prompt, GREEDY, 5, request_id="p"))
    core.step()  # r's prompt and 4 of p's 21 tokens: both run, p has not sampled
    assert core.sequences["p"].request.status is RequestStatus.RUNNING
    assert not joins(core, "c")  # a running parent was admitted without a seat for it


def test_stop_tokens_end_a_request_unless_it_ignores_eos(target):
    model, tokenizer = target
    eos = tokenizer.eos_id
    config = SchedulerConfig(token_budget=256, max_num_seqs=4, block_size=16, num_blocks=64)
    prompt = tokenizer.encode("Once upon a time, there was a fox.", add_bos=True)
    reference_tokens = list(generate(model, prompt, GREEDY, max_new_tokens=200))
    assert eos in reference_tokens, "the test needs a prompt whose greedy text ends"
    core = EngineCore(model, config, stop_token_ids={eos})
    stopped = generate_batch(core, [prompt], GREEDY, max_tokens=200)[0]
    assert stopped == reference_tokens[: reference_tokens.index(eos) + 1]
    ignoring = generate_batch(core, [prompt], GREEDY, max_tokens=200, ignore_eos=True)[0]
    assert len(ignoring) == 200


def test_logprobs_are_the_models_own_and_only_for_the_requests_that_ask(target, prompts):
    """A greedy token's logprob is log_softmax of the model's logits at its position, run
    here without the engine; a sampled one's too (raw, as vLLM reports by default: not
    the tempered distribution it was drawn from); forks get theirs; others get none."""
    model, _ = target
    config = SchedulerConfig(token_budget=64, max_num_seqs=8, num_blocks=128, block_size=16)
    core = EngineCore(model, config)
    asks = {
        "greedy": (prompts[0], SamplingParams(temperature=0, logprobs=3)),
        "sampled": (prompts[1], SamplingParams(temperature=0.5, seed=1, logprobs=0)),
        "plain": (prompts[2], GREEDY),
        "parent": (prompts[3], SamplingParams(temperature=1.0, seed=5, logprobs=2)),
        "fork": (prompts[3], SamplingParams(temperature=1.0, seed=6, logprobs=2)),
    }
    for request_id, (prompt, params) in asks.items():
        fork_of = "parent" if request_id == "fork" else None
        request = EngineRequest(prompt, params, 6, request_id=request_id, ignore_eos=True)
        core.add_request(dataclasses.replace(request, fork_of=fork_of))
    outputs: dict[str, list] = {request_id: [] for request_id in asks}
    while not core.idle:
        for out in core.step():
            outputs[out.request_id].append(out)
    assert all(o.logprobs is None for o in outputs["plain"])
    tempered_differs = False
    for request_id in ("greedy", "sampled", "parent", "fork"):
        prompt, params = asks[request_id]
        tokens = [o.token_id for o in outputs[request_id]]
        with torch.inference_mode():
            logits = model(torch.tensor([prompt + tokens]))[0, len(prompt) - 1 : -1].float()
        for out, row in zip(outputs[request_id], logits, strict=True):
            expected = row.log_softmax(-1)
            assert abs(out.logprobs.logprob - float(expected[out.token_id])) < 1e-4
            top = expected.topk(params.logprobs).values.tolist()
            assert [v for _, v in out.logprobs.top] == pytest.approx(top, abs=1e-4)
            assert all(abs(v - float(expected[i])) < 1e-4 for i, v in out.logprobs.top)
            if request_id == "sampled":
                tempered = (row / params.temperature).log_softmax(-1)[out.token_id]
                tempered_differs |= abs(out.logprobs.logprob - float(tempered)) > 1e-3
    assert tempered_differs
    assert [o.token_id for o in outputs["parent"]] != [o.token_id for o in outputs["fork"]]


@pytest.mark.slow
def test_logit_bias_and_min_tokens_steer_a_batched_request(target):
    model, tokenizer = target
    eos = tokenizer.eos_id
    config = SchedulerConfig(token_budget=256, max_num_seqs=4, block_size=16, num_blocks=64)
    prompt = tokenizer.encode("Once upon a time, there was a fox.", add_bos=True)
    core = EngineCore(model, config, stop_token_ids={eos})
    ended = generate_batch(core, [prompt], GREEDY, 200)[0]
    assert ended[-1] == eos, "the test needs a prompt whose greedy text ends"
    longer = SamplingParams(temperature=0, min_tokens=len(ended) + 3)
    banned = SamplingParams(temperature=0, logit_bias={ended[0]: -100.0})
    out = generate_batch(core, [prompt, prompt], [longer, banned], max_tokens=len(ended) + 5)
    # min_tokens: the same greedy text until the end-of-sequence token, which it may not pick.
    assert out[0][: len(ended) - 1] == ended[:-1]
    assert eos not in out[0][: longer.min_tokens] and len(out[0]) >= longer.min_tokens
    assert out[1][0] != ended[0]


class Guesser:
    """A stand-in proposer: four guesses whatever it is shown; it keeps what it was shown."""

    def __init__(self) -> None:
        self.shown: list[list[int]] = []

    def propose(self, token_ids: list[int]) -> list[int]:
        self.shown.append(list(token_ids))
        return [5, 6, 7, 8]


SMALL = SchedulerConfig(token_budget=64, max_num_seqs=8, num_blocks=64, block_size=16)


def test_guesses_are_asked_for_each_decoding_sequence_that_may_emit_two_tokens_more(target):
    guesser, sizes = Guesser(), []

    def max_guesses(batch_size: int) -> int:
        sizes.append(batch_size)
        return 2

    core = EngineCore(target[0], SMALL, proposer=guesser, max_guesses=max_guesses)
    for request_id, max_tokens in (("long", 10), ("two", 2), ("three", 3)):
        core.add_request(EngineRequest([0, 9, 10], GREEDY, max_tokens, request_id=request_id))
    core.step()  # the prompts: nothing decodes yet, nobody is asked
    assert guesser.shown == [] and sizes == [0]
    shown = [list(core.sequences[r].token_ids) for r in ("long", "three")]
    core.step()  # "two" has one token to go: a step emits at least one, so no guess for it
    assert guesser.shown == shown and sizes == [0, 3]  # the last step's batch size
    spec = core.spec_decoding  # "long" checks 2 guesses (the rule's cap), "three" 1 (its room)
    assert (spec.num_drafts, spec.num_draft_tokens) == (2, 3)


@pytest.mark.parametrize(("max_guesses", "drafted"), [(lambda batch_size: 0, 0), (None, 4)])
def test_no_guess_where_the_rule_says_none_and_every_guess_without_a_rule(
    target, max_guesses, drafted
):
    guesser = Guesser()
    core = EngineCore(target[0], SMALL, proposer=guesser, max_guesses=max_guesses)
    core.add_request(EngineRequest([0, 9, 10], GREEDY, 10, request_id="a"))
    core.step()
    core.step()
    assert len(guesser.shown) == (drafted > 0)
    assert core.spec_decoding.num_draft_tokens == drafted


def test_a_guess_accepted_earlier_in_the_step_is_output_the_penalties_see(target):
    """Checking guesses draws each position as decoding one token at a time would: a guess
    accepted at the position before is already output, and a repetition penalty weighs it."""
    core = EngineCore(target[0], SMALL)
    penalised = SamplingParams(temperature=0, repetition_penalty=2.0)
    core.add_request(EngineRequest([0, 9, 10], penalised, 10, request_id="a"))
    logits = torch.zeros(3, target[0].config.vocab_size)
    logits[:2, 5], logits[1, 7] = 2.0, 1.9  # row 0 draws 5; row 1, 7 only if 5 is penalised
    (emitted,) = core.sample_tokens(logits, [core.sequences["a"]], [[5, 7]], [0, 3])
    assert emitted[:2] == [5, 7]


def test_a_draft_model_fills_its_guesses_after_scheduling_and_keeps_its_kv_every_step(
    target, prompts
):
    """The core runs the draft on every step, guessing or not (its KV must cover every
    block the target computes), after the scheduler has sized the guesses and given the
    step its blocks; the tokens are generate's."""
    model = target[0]
    drafter = DraftProposer(load_draft("cpu")[0], SMALL.num_blocks, SMALL.block_size, 3)
    calls = []
    fill = drafter.draft

    def draft(out, running):
        calls.append((dict(out.num_scheduled_tokens), set(running)))
        fill(out, running)

    drafter.draft = draft
    core = EngineCore(model, SMALL, proposer=drafter, max_guesses=lambda batch_size: 0)
    outputs = generate_batch(core, prompts[:2], GREEDY, max_tokens=6)
    assert outputs == [reference(model, [p], 6)[0] for p in prompts[:2]]
    assert len(calls) == core.num_steps and core.spec_decoding.num_drafts == 0  # no guesses
    assert all(scheduled.keys() <= running for scheduled, running in calls)
    unguessed_steps = core.num_steps
    core = EngineCore(model, SMALL, proposer=drafter)
    assert generate_batch(core, prompts[:2], GREEDY, max_tokens=6) == outputs
    assert core.spec_decoding.num_accepted_tokens > 0 and core.num_steps < unguessed_steps


def test_a_draft_that_does_not_share_the_tokenizer_or_the_blocks_is_refused(target):
    model, _ = target
    other = Llama(dataclasses.replace(model.config, vocab_size=500))
    with pytest.raises(ValueError, match=r"vocabulary \(500 tokens\) is not the target's \(948\)"):
        EngineCore(model, SMALL, proposer=DraftProposer(other, 64, 16, 4))
    for num_blocks, block_size in ((32, 16), (64, 8)):
        with pytest.raises(ValueError, match="same number, size"):
            EngineCore(model, SMALL, proposer=DraftProposer(model, num_blocks, block_size, 4))
    # The same blocks: fine, and its KV (here a copy of the target's) doubles a block's bytes.
    core = EngineCore(model, SMALL, proposer=DraftProposer(model, 64, 16, 4))
    assert core.bytes_per_block == 2 * EngineCore(model, SMALL).bytes_per_block == 2 * 16 * 2048
