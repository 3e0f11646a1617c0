"""Speculative decoding in the engine core changes no token, only how many a step emits.

The oracle is the same engine core without a proposer: with prompt lookup or the draft
model guessing, every sequence of a mixed batch (prompts chunking beside speculating decodes, forks,
preemptions, stop tokens, penalties, seeds) must get the same tokens, the same finish
reasons and the same logprobs. The sampled path is also checked against the model's
own distribution (a chi-square test), and the rollback against the block manager's
invariants and the prefix cache's contents.
"""

from __future__ import annotations

import dataclasses
import random

import pytest
import torch

from llmserve_ref.engine.block_invariants import check_blocks
from llmserve_ref.engine.draft_proposer import DraftProposer
from llmserve_ref.engine.engine_core import EngineCore
from llmserve_ref.engine.interface import EngineRequest, TokenOutput
from llmserve_ref.engine.kv_block import blocks_for
from llmserve_ref.engine.ngram_proposer import NgramProposer
from llmserve_ref.engine.scheduler_config import SchedulerConfig
from llmserve_ref.engine.speculative import probabilities
from llmserve_ref.engine.speculative_config import SpeculativeConfig
from llmserve_ref.model import corpus
from llmserve_ref.model.generate import generate
from llmserve_ref.model.sampling import SamplingParams
from llmserve_ref.model.weights import load_draft, load_target

GREEDY = SamplingParams(temperature=0)
LOOKUP = NgramProposer(prompt_lookup_min=1, prompt_lookup_max=4, num_speculative_tokens=4)


@pytest.fixture(scope="module")
def target():
    return load_target("cpu")


@pytest.fixture(scope="module")
def draft():
    return load_draft("cpu")[0]


@pytest.fixture(params=["lookup", "draft"])
def guesser(request, draft):
    """A proposer for an engine with `config`'s blocks: prompt lookup, or the draft model
    (4 guesses each), whose KV is paged in those blocks."""

    def make(config: SchedulerConfig):
        if request.param == "lookup":
            return LOOKUP
        return DraftProposer(draft, config.num_blocks, config.block_size, 4)

    return make


@pytest.fixture(scope="module")
def prompts(target):
    """12 prompts: six retell a held-out story after telling it (lookup guesses well), six
    are plain prefixes of held-out stories, 1 to 80 tokens (it guesses less)."""
    _, tokenizer = target
    rng = random.Random(0)
    docs = corpus.heldout_documents(12)
    retell = [
        tokenizer.encode(d, add_bos=True)[:60] + tokenizer.encode(" " + d)[:12] for d in docs[:6]
    ]
    plain = [tokenizer.encode(d, add_bos=True)[: rng.randint(1, 80)] for d in docs[6:]]
    return [p for pair in zip(retell, plain, strict=True) for p in pair]


def run(
    core: EngineCore, requests: list[EngineRequest], check=None
) -> dict[str, list[TokenOutput]]:
    """Step `core` through `requests` until all end; each request's outputs, by id."""
    outputs: dict[str, list[TokenOutput]] = {r.request_id: [] for r in requests}
    for request in requests:
        core.add_request(request)
    while not core.idle:
        for out in core.step():
            outputs[out.request_id].append(out)
        if check is not None:
            check(core)
    return outputs


def requests_for(prompts, params, max_tokens=40, **kwargs) -> list[EngineRequest]:
    params = [params] * len(prompts) if isinstance(params, SamplingParams) else params
    return [
        EngineRequest(list(p), q, max_tokens, request_id=str(i), **kwargs)
        for i, (p, q) in enumerate(zip(prompts, params, strict=True))
    ]


def same_outputs(a: dict[str, list[TokenOutput]], b: dict[str, list[TokenOutput]]) -> None:
    """Token for token, with the same finish reasons and logprobs (to float rounding)."""
    assert a.keys() == b.keys()
    for request_id in a:
        assert [o.token_id for o in a[request_id]] == [o.token_id for o in b[request_id]]
        assert [o.finish_reason for o in a[request_id]] == [o.finish_reason for o in b[request_id]]
        for x, y in zip(a[request_id], b[request_id], strict=True):
            assert (x.logprobs is None) == (y.logprobs is None)
            if x.logprobs is not None:
                assert x.logprobs.logprob == pytest.approx(y.logprobs.logprob, abs=1e-4)
                assert [t for t, _ in x.logprobs.top] == [t for t, _ in y.logprobs.top]


def rollback_holds(core: EngineCore) -> None:
    """After a step: the allocator's invariants, no sequence holding a block past its
    tokens (a rejected guess's block went back), and every cached block keyed by tokens
    the sequence really has."""
    bm = core.scheduler.block_manager
    check_blocks(bm)
    for request in core.scheduler.running:
        table = bm.tables[request.request_id]
        assert len(table) <= blocks_for(request.num_tokens, bm.block_size), request
        assert request.num_computed_tokens <= request.num_tokens - 1 or not request.is_decoding
        for i, _ in enumerate(bm.prefixes[request.request_id]):
            tokens = tuple(request.token_ids[i * bm.block_size : (i + 1) * bm.block_size])
            key = table[i].key  # None: left out of the cache (another sequence cached it)
            assert key is None or key[1] == tokens, (request, i)


@pytest.mark.parametrize(
    ("token_budget", "block_size"),
    [(512, 16), (24, 8), (40, 1)],
    ids=["whole-prompts", "chunked-beside-guesses", "block-size-1"],
)
def test_greedy_output_with_guesses_is_the_output_without(
    target, prompts, guesser, token_budget, block_size
):
    model, _ = target
    config = SchedulerConfig(
        token_budget=token_budget,
        max_num_seqs=12,
        block_size=block_size,
        num_blocks=2048 // block_size,
    )
    plain = run(EngineCore(model, config), requests_for(prompts, GREEDY))
    speculating = EngineCore(model, config, proposer=guesser(config))
    guessed = run(speculating, requests_for(prompts, GREEDY), rollback_holds)
    same_outputs(guessed, plain)
    # It did speculate, and guessed right and wrong: both paths ran.
    assert (
        0
        < speculating.spec_decoding.num_accepted_tokens
        < speculating.spec_decoding.num_draft_tokens
    )
    assert speculating.num_steps < sum(map(len, plain.values()))
    assert speculating.scheduler.block_manager.num_used_blocks == 0


def test_sampling_penalties_stops_and_logprobs_are_unchanged_by_guesses(target, prompts, guesser):
    """Seeded draws at each guessed position are the draws decoding one token at a time
    makes: the same generator, the same history (penalties and min_tokens see the
    accepted guesses), so the same tokens; a stop token among the guesses ends it."""
    model, tokenizer = target
    kinds = [
        SamplingParams(temperature=0.7, seed=1, logprobs=2),
        SamplingParams(temperature=1.0, top_p=0.9, seed=2),
        SamplingParams(temperature=0.3, top_k=5, seed=3, repetition_penalty=1.3),
        SamplingParams(temperature=0, presence_penalty=0.5, frequency_penalty=0.3, logprobs=0),
        SamplingParams(temperature=0, min_tokens=30, logprobs=1),
        SamplingParams(temperature=0.8, seed=4, logit_bias={13: 2.0}),
    ]
    params = [kinds[i % len(kinds)] for i in range(len(prompts))]
    config = SchedulerConfig(token_budget=48, max_num_seqs=12, block_size=8, num_blocks=512)
    eos = {tokenizer.eos_id}
    plain = run(EngineCore(model, config, stop_token_ids=eos), requests_for(prompts, params, 48))
    core = EngineCore(model, config, stop_token_ids=eos, proposer=guesser(config))
    guessed = run(core, requests_for(prompts, params, 48), rollback_holds)
    same_outputs(guessed, plain)
    assert core.spec_decoding.num_accepted_tokens > 0
    assert any(o[-1].finish_reason == "stop" for o in plain.values()), "no request stopped"


def test_preemption_and_prefix_hits_beside_guesses_change_no_token(target, prompts, guesser):
    model, _ = target
    shared = prompts[0][:32]
    batch = [shared + p[1:20] for p in prompts[:10]]
    config = SchedulerConfig(
        token_budget=48, max_num_seqs=8, block_size=8, num_blocks=36, watermark=0.0
    )
    plain = run(EngineCore(model, config), requests_for(batch, GREEDY, 40))
    core = EngineCore(model, config, proposer=guesser(config))
    guessed = run(core, requests_for(batch, GREEDY, 40), rollback_holds)
    same_outputs(guessed, plain)
    bm = core.scheduler.block_manager
    assert (
        core.scheduler.num_preemptions > 0
        and bm.num_hits > 0
        and core.spec_decoding.num_accepted_tokens > 0
    )
    assert bm.num_used_blocks == 0


def test_a_cached_prefix_written_while_speculating_holds_only_verified_tokens(
    target, prompts, guesser
):
    """A rejected guess's keys and values never reach the prefix cache: a request that then
    continues a finished one's whole text, from its cached blocks, gets what `generate`
    gives that text."""
    model, _ = target
    config = SchedulerConfig(token_budget=64, max_num_seqs=4, block_size=4, num_blocks=256)
    core = EngineCore(model, config, proposer=guesser(config))
    first = run(core, requests_for(prompts[:4], GREEDY, 40))
    assert (
        core.spec_decoding.num_accepted_tokens < core.spec_decoding.num_draft_tokens
    )  # some guesses were rolled back
    texts = [list(p) + [o.token_id for o in first[str(i)]] for i, p in enumerate(prompts[:4])]
    hits_before = core.scheduler.block_manager.num_hits
    again = run(
        core,
        [
            dataclasses.replace(r, request_id=f"again-{r.request_id}")
            for r in requests_for(texts, GREEDY, 8)
        ],
    )
    assert core.scheduler.block_manager.num_hits - hits_before > sum(map(len, texts)) // 2
    for i, text in enumerate(texts):
        assert [o.token_id for o in again[f"again-{i}"]] == list(generate(model, text, GREEDY, 8))


def test_rollback_after_a_fork_lets_go_of_no_block_another_sequence_holds(target, prompts, guesser):
    model, _ = target
    config = SchedulerConfig(token_budget=64, max_num_seqs=8, block_size=8, num_blocks=256)
    prompt = prompts[2][:61]  # the shared prompt ends inside a block: forks copy it

    core = EngineCore(model, config, proposer=guesser(config))
    bm = core.scheduler.block_manager
    truncate = bm.truncate
    released = []

    def truncate_checked(seq_id, num_tokens):
        tail = bm.tables[seq_id][blocks_for(num_tokens, bm.block_size) :]
        if num_tokens:  # a rollback (freeing the whole table is truncating it to 0)
            assert all(b.ref_count == 1 for b in tail), "a rollback released a shared block"
            released.extend(tail)
        truncate(seq_id, num_tokens)

    bm.truncate = truncate_checked
    guessed = run(core, forks_of(prompt), rollback_holds)
    same_outputs(guessed, run(EngineCore(model, config), forks_of(prompt)))
    assert released, "no guess was rolled back"
    assert len({tuple(o.token_id for o in out) for out in guessed.values()}) > 1  # they differ


def test_a_seeded_request_alone_equals_it_among_others_while_speculating(target, prompts, guesser):
    model, _ = target
    params = [SamplingParams(temperature=0.9, top_p=0.95, seed=s) for s in range(len(prompts))]
    config = SchedulerConfig(token_budget=64, max_num_seqs=12, block_size=16, num_blocks=256)
    together = run(
        EngineCore(model, config, proposer=guesser(config)), requests_for(prompts, params, 24)
    )
    for i in (0, 3):
        alone = run(
            EngineCore(model, config, proposer=guesser(config)),
            requests_for([prompts[i]], [params[i]], 24),
        )
        assert [o.token_id for o in together[str(i)]] == [o.token_id for o in alone["0"]]


def chi_square_p_value(
    counts: torch.Tensor, probs: torch.Tensor, min_expected: float = 5.0
) -> float:
    """Pearson's chi-square test of `counts` against `probs`, rare tokens pooled in one bin."""
    n = counts.sum()
    expected = probs * n
    common = expected >= min_expected
    observed = torch.cat([counts[common], counts[~common].sum().view(1)])
    expected = torch.cat([expected[common], expected[~common].sum().view(1)])
    keep = expected > 0
    observed, expected = observed[keep], expected[keep]
    statistic = ((observed - expected) ** 2 / expected).sum()
    dof = len(expected) - 1
    return float(torch.special.gammaincc(torch.tensor(dof / 2), statistic / 2))


@dataclasses.dataclass(frozen=True)
class Guess:
    """A proposer that always guesses the same token (the verification rule holds for any)."""

    token_id: int

    def propose(self, token_ids):
        return [self.token_id]


@pytest.mark.parametrize(
    "params",
    [SamplingParams(temperature=1.0), SamplingParams(temperature=0.7, top_p=0.9)],
    ids=["t1.0", "t0.7-top-p0.9"],
)
@pytest.mark.parametrize("guessing", ["fixed-guess", "draft"])
def test_a_guessed_position_keeps_the_models_distribution(target, draft, params, guessing):
    """The second output token, drawn at a guessed position (the first decode step checks
    one guess, as max_tokens leaves room for two more), is distributed as the model says:
    600 seeded sequences, 48 a step, chi-square against the model's distribution. The
    prompt is a held-out story cut where its next token is near certain (".", probability
    0.99+), and the guess is the likeliest second token (given), or the draft model's
    (greedy, from its paged KV), so guesses pass and fail often."""
    model, tokenizer = target
    prompt = tokenizer.encode(corpus.heldout_documents(1)[0], add_bos=True)[:55]
    period = tokenizer.encode(".")[0]
    with torch.inference_mode():
        logits = model(torch.tensor([[*prompt, period]]))[0, -1:]
    probs = probabilities(logits, params)[0].double()
    config = SchedulerConfig(token_budget=256, max_num_seqs=48, block_size=16, num_blocks=512)
    proposer = (
        Guess(int(probs.argmax()))
        if guessing == "fixed-guess"
        else DraftProposer(draft, config.num_blocks, config.block_size, 1)
    )
    core = EngineCore(model, config, proposer=proposer)
    seeded = [dataclasses.replace(params, seed=s) for s in range(600)]
    outputs = run(core, requests_for([prompt] * 600, seeded, 3, ignore_eos=True))
    seconds = [out[1].token_id for out in outputs.values() if out[0].token_id == period]
    assert len(seconds) >= 590 and core.spec_decoding.num_drafts >= 590
    assert (
        0.1 < core.spec_decoding.num_accepted_tokens / core.spec_decoding.num_drafts < 0.9
    )  # both paths, often
    counts = torch.bincount(torch.tensor(seconds), minlength=len(probs)).double()
    assert chi_square_p_value(counts, probs) > 0.001


def test_above_a_batch_size_the_rule_turns_guessing_off_and_nothing_else_changes(target, prompts):
    """vLLM's num_speculative_tokens_per_batch_size: 4 guesses while at most 3 sequences
    ran in the last step, none from 4 on. Twelve requests of 8 to 74 tokens, six at a
    time: no guesses until the batch drains to 3."""
    model, _ = target
    config = SchedulerConfig(token_budget=256, max_num_seqs=6, block_size=16, num_blocks=256)
    rule = SpeculativeConfig.from_dict(
        {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1,
         "prompt_lookup_max": 4, "num_speculative_tokens_per_batch_size": [[1, 3, 4], [4, 6, 0]]}
    )  # fmt: skip
    core = EngineCore(model, config, proposer=rule.proposer(), max_guesses=rule.num_guesses)
    sizes, drafts = [0], [0]  # per step: sequences scheduled, drafts so far

    def record(core):
        sizes.append(core.batch_size)
        drafts.append(core.spec_decoding.num_drafts)

    requests = [
        dataclasses.replace(r, max_tokens=8 + 6 * i)
        for i, r in enumerate(requests_for(prompts, GREEDY))
    ]
    guessed = run(core, requests, record)
    same_outputs(guessed, run(EngineCore(model, config), requests))
    # A step's guesses are sized by the batch of the step before it.
    guessing = [sizes[i - 1] for i in range(1, len(sizes)) if drafts[i] > drafts[i - 1]]
    assert guessing and max(guessing) <= 3 and max(sizes) == 6


def forks_of(prompt, max_tokens=32) -> list[EngineRequest]:
    """Four seeded samples of one prompt, the last three forks of the first."""
    params = [SamplingParams(temperature=0.8, seed=s) for s in range(4)]
    requests = requests_for([prompt] * 4, params, max_tokens)
    return [requests[0]] + [dataclasses.replace(r, fork_of="0") for r in requests[1:]]
