"""Speculative decoding: greedy equals the target's greedy, sampling keeps p, caches roll back."""

from __future__ import annotations

import copy
import itertools
import math
from types import SimpleNamespace

import pytest
import torch

from llmserve_ref.device import get_device
from llmserve_ref.engine import speculative
from llmserve_ref.engine.speculative import (
    SpeculativeDecoder,
    SpeculativeStats,
    decode_prompts,
    expected_speedup,
    expected_tokens_per_forward,
    forward_steppers,
    probabilities,
    residual,
    verify,
)
from llmserve_ref.model.generate import generate
from llmserve_ref.model.sampling import SamplingParams
from llmserve_ref.model.weights import load_draft, load_target
from llmserve_ref.planning.measure import torch_threads

GREEDY = SamplingParams(temperature=0)
# A statistical test below fails a correct implementation with this probability (per seed).
FALSE_ALARM = 1e-3


@pytest.fixture(autouse=True)
def one_thread():
    """The models are tiny: one CPU thread is as fast, and not stalled by other processes."""
    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def models():
    device = get_device()
    target, tokenizer = load_target(device)
    draft, _ = load_draft(device)
    return target, draft, tokenizer


@pytest.fixture(scope="module")
def prompts(models):
    *_, tokenizer = models
    texts = ("Once upon a time,", "Mia went to", "<|user|>Tell me a story.<|assistant|>")
    return [tokenizer.encode(text, add_bos=True) for text in texts]


def chi_square_p_value(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """Pearson's chi-square test of `counts` against `probs`, pooling cells expected below 5.

    The p-value is the chi-square survival function, Q(k/2, x/2) (regularized upper
    incomplete gamma) for k degrees of freedom.
    """
    counts, expected = counts.double(), probs.double() * counts.sum()
    small = expected < 5
    counts = torch.cat((counts[~small], counts[small].sum().view(1)))
    expected = torch.cat((expected[~small], expected[small].sum().view(1)))
    keep = expected > 0
    assert counts[~keep].sum() == 0, "a sample fell on a cell of probability 0"
    counts, expected = counts[keep], expected[keep]
    statistic = ((counts - expected) ** 2 / expected).sum()
    dof = torch.tensor(len(counts) - 1, dtype=torch.float64)
    return float(torch.special.gammaincc(dof / 2, statistic / 2))


# --- greedy ---------------------------------------------------------------------------------


def test_greedy_speculative_equals_target_greedy(models, prompts):
    target, draft, _ = models
    for prompt in prompts:
        reference = list(generate(target, prompt, GREEDY, max_new_tokens=40))
        for gamma in (1, 2, 3, 5, 8):
            decoder = SpeculativeDecoder(target, draft, prompt, GREEDY, gamma, max_new_tokens=40)
            assert list(decoder) == reference, f"gamma {gamma}, prompt {prompt}"
            assert decoder.stats.accepted > 0  # the draft did guess right, so rounds skipped steps


def test_greedy_verification_is_argmax_matching():
    """With one-hot p and q, rejection sampling keeps guesses while they are p's argmax."""
    vocab = 5
    p_argmax, guesses = [3, 1, 4, 0], [3, 1, 2]  # the third guess is wrong
    p = torch.nn.functional.one_hot(torch.tensor(p_argmax), vocab).float()
    q = torch.nn.functional.one_hot(torch.tensor(guesses), vocab).float()
    for seed in range(20):
        assert verify(guesses, q, p, torch.Generator().manual_seed(seed)) == [3, 1, 4]
    assert verify(p_argmax[:3], p[:3], p) == [3, 1, 4, 0]  # all three pass: a bonus token


def test_stop_token_ends_the_stream_like_generate(models, prompts):
    target, draft, _ = models
    reference = list(generate(target, prompts[0], GREEDY, max_new_tokens=20))
    stop = reference[6]
    expected = reference[: reference.index(stop) + 1]
    decoder = SpeculativeDecoder(
        target, draft, prompts[0], GREEDY, gamma=4, max_new_tokens=20, stop_token_ids={stop}
    )
    assert list(decoder) == expected
    assert decoder.done
    with pytest.raises(RuntimeError, match="finished"):
        decoder.step()


# --- caches ---------------------------------------------------------------------------------


@torch.inference_mode()
def test_caches_after_a_rejection_equal_a_fresh_recompute(models, prompts):
    target, draft, _ = models
    gamma = 4
    decoder = SpeculativeDecoder(
        target, draft, prompts[0], SamplingParams(temperature=1.0, seed=3), gamma, 60
    )
    decoder.step()  # prefill
    rejected = 0
    while rejected < 3 and not decoder.done:
        before = decoder.stats.accepted
        decoder.step()
        if decoder.stats.accepted - before == gamma:
            continue
        rejected += 1
        tokens = decoder.tokens
        assert decoder.target_cache.length == len(tokens) - 1
        fresh = target(torch.tensor([tokens], device=target.device))[0, -1]
        cached = target(torch.tensor([tokens[-1:]], device=target.device), decoder.target_cache)
        torch.testing.assert_close(cached[0, -1], fresh, rtol=1e-4, atol=1e-4)
        decoder.target_cache.truncate(len(tokens) - 1)
        pending = tokens[decoder.draft_cache.length :]
        assert decoder.draft_cache.length == len(tokens) - 1  # a rejection leaves only the new one
        fresh = draft(torch.tensor([tokens], device=draft.device))[0, -1]
        cached = draft(torch.tensor([pending], device=draft.device), decoder.draft_cache)
        torch.testing.assert_close(cached[0, -1], fresh, rtol=1e-4, atol=1e-4)
        decoder.draft_cache.truncate(len(tokens) - 1)
    assert rejected == 3


@torch.inference_mode()
def test_draft_catches_up_after_all_guesses_pass(models, prompts):
    """After a fully accepted round the draft has not seen its last guess: it feeds two tokens."""
    target, draft, _ = models
    decoder = SpeculativeDecoder(target, draft, prompts[0], GREEDY, gamma=2, max_new_tokens=60)
    decoder.step()
    while not decoder.done:
        before = decoder.stats.accepted
        decoder.step()
        if decoder.stats.accepted - before == 2:
            break
    tokens = decoder.tokens
    pending = tokens[decoder.draft_cache.length :]
    assert len(pending) == 2
    fresh = draft(torch.tensor([tokens], device=draft.device))[0, -1]
    cached = draft(torch.tensor([pending], device=draft.device), decoder.draft_cache)[0, -1]
    torch.testing.assert_close(cached, fresh, rtol=1e-4, atol=1e-4)


# --- the distribution is preserved ----------------------------------------------------------


def toy_tables(vocab: int, gamma: int, seed: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Context-dependent p and q: table i is ``[vocab] * (i + 1)``, a distribution per prefix.

    Some entries are 0 in one model and not the other, as top-k or top-p make them.
    """
    g = torch.Generator().manual_seed(seed)

    def table(depth: int) -> torch.Tensor:
        weights = torch.rand(*[vocab] * depth, vocab, generator=g) ** 2
        weights[torch.rand(weights.shape, generator=g) < 0.25] = 0
        weights[..., 0] += 0.05  # no row may be all zero
        return weights / weights.sum(-1, keepdim=True)

    return [table(i) for i in range(gamma + 1)], [table(i) for i in range(gamma)]


def speculative_histogram(vocab: int, gamma: int, samples: int, seed: int) -> torch.Tensor:
    """Counts of the first gamma + 1 tokens from `samples` draft-then-verify rounds.

    A round emits 1 to gamma + 1 tokens; the rest are completed from p, as the next
    rounds would (by induction, each of them samples as the target does).
    """
    p, q = toy_tables(vocab, gamma, seed=0)
    g = torch.Generator().manual_seed(seed)
    counts = torch.zeros(vocab ** (gamma + 1), dtype=torch.long)
    for _ in range(samples):
        guesses: list[int] = []
        for i in range(gamma):
            guesses.append(int(torch.multinomial(q[i][tuple(guesses)], 1, generator=g)))
        q_rows = torch.stack([q[i][tuple(guesses[:i])] for i in range(gamma)])
        p_rows = torch.stack([p[i][tuple(guesses[:i])] for i in range(gamma + 1)])
        tokens = verify(guesses, q_rows, p_rows, g)
        while len(tokens) < gamma + 1:
            tokens.append(int(torch.multinomial(p[len(tokens)][tuple(tokens)], 1, generator=g)))
        counts[sum(t * vocab ** (gamma - i) for i, t in enumerate(tokens))] += 1
    return counts


def exact_target_probs(vocab: int, gamma: int) -> torch.Tensor:
    """P(x_1 .. x_{gamma+1}) = prod_i p_i(x_i | x_<i), by enumerating every sequence."""
    p, _ = toy_tables(vocab, gamma, seed=0)
    probs = torch.zeros(vocab ** (gamma + 1), dtype=torch.float64)
    for cell, tokens in enumerate(itertools.product(range(vocab), repeat=gamma + 1)):
        probs[cell] = math.prod(float(p[i][tokens[: i + 1]]) for i in range(gamma + 1))
    return probs


def test_verify_preserves_the_target_distribution_exactly_enumerated():
    """Chi-square of 20000 rounds (vocab 4, gamma 2: 64 sequences) against the exact p."""
    vocab, gamma = 4, 2
    probs = exact_target_probs(vocab, gamma)
    assert torch.isclose(probs.sum(), torch.tensor(1.0, dtype=torch.float64))
    counts = speculative_histogram(vocab, gamma, samples=20000, seed=1)
    assert chi_square_p_value(counts, probs) > FALSE_ALARM


def test_the_distribution_test_catches_a_wrong_residual(monkeypatch):
    """The same test, on a verifier that resamples from p after a rejection, must fail."""
    monkeypatch.setattr(speculative, "residual", lambda p, q: p)
    vocab, gamma = 4, 2
    counts = speculative_histogram(vocab, gamma, samples=20000, seed=1)
    assert chi_square_p_value(counts, exact_target_probs(vocab, gamma)) < FALSE_ALARM


@pytest.mark.slow
@torch.inference_mode()
def test_sampled_speculative_decoding_matches_the_target_end_to_end(models, prompts):
    """The first 3 tokens of real speculative runs (top-k 2) against the target's exact law.

    Token 1 comes from the target's prefill, tokens 2 and 3 from a round of 2 guesses.
    The exact probabilities come from the target itself, by enumerating the 8
    sequences top-k 2 allows; 800 seeded samples, chi-square at `FALSE_ALARM`.
    """
    target, draft, _ = models
    params = SamplingParams(temperature=1.0, top_k=2)
    prompt = prompts[0]
    tokens3 = 3
    # Exact: p(a) p(b | a) p(c | a, b), from the target's processed distributions.
    law: dict[tuple[int, ...], float] = {(): 1.0}
    for _ in range(tokens3):
        grown = {}
        for prefix, mass in law.items():
            ids = torch.tensor([[*prompt, *prefix]], device=target.device)
            p = probabilities(target(ids)[0, -1], params)
            for token in p.nonzero().flatten().tolist():
                grown[(*prefix, token)] = mass * float(p[token])
        law = grown
    cells = {seq: i for i, seq in enumerate(law)}
    generator = torch.Generator().manual_seed(2024)
    counts = torch.zeros(len(cells), dtype=torch.long)
    for _ in range(800):
        decoder = SpeculativeDecoder(
            target, draft, prompt, params, gamma=2, max_new_tokens=tokens3 + 1, generator=generator
        )
        while len(decoder.output) < tokens3:
            decoder.step()
        counts[cells[tuple(decoder.output[:tokens3])]] += 1
    probs = torch.tensor([law[seq] for seq in cells], dtype=torch.float64)
    assert chi_square_p_value(counts, probs) > FALSE_ALARM


# --- residual and bad input -----------------------------------------------------------------


def test_residual_is_the_normalized_positive_part():
    p, q = torch.tensor([0.5, 0.3, 0.2, 0.0]), torch.tensor([0.2, 0.3, 0.4, 0.1])
    torch.testing.assert_close(residual(p, q), torch.tensor([1.0, 0.0, 0.0, 0.0]))
    p, q = torch.tensor([0.4, 0.4, 0.2]), torch.tensor([0.2, 0.2, 0.6])
    torch.testing.assert_close(residual(p, q), torch.tensor([0.5, 0.5, 0.0]))


def test_residual_that_rounds_to_zero_falls_back_to_p():
    """p and q equal up to rounding: max(0, p - q) has no mass; normalizing it would give NaN."""
    q = torch.softmax(torch.randn(1000, generator=torch.Generator().manual_seed(0)), dim=0)
    p = q.clone()
    p[7] = torch.nextafter(p[7], torch.tensor(0.0))  # p(7) < q(7) by one ulp: 7 can be rejected
    assert float((p - q).clamp(min=0).sum()) == 0.0
    assert torch.equal(residual(p, q), p)
    # verify then samples from p instead of failing, whichever way its coin falls.
    for seed in range(5):
        g = torch.Generator().manual_seed(seed)
        tokens = verify([7], q.unsqueeze(0), torch.stack([p, p]), g)
        assert 1 <= len(tokens) <= 2


def test_out_of_vocabulary_ids_are_refused(models):
    target, draft, _ = models
    vocab = target.config.vocab_size
    p, q = torch.full((2, vocab), 1 / vocab), torch.full((1, vocab), 1 / vocab)
    for bad in (vocab, -1):
        with pytest.raises(ValueError, match=r"outside the vocabulary \[0, 948\)"):
            verify([bad], q, p)
        with pytest.raises(ValueError, match="outside the vocabulary"):
            SpeculativeDecoder(target, draft, [0, bad])


def test_shapes_and_setup_are_checked(models, tiny_llama):
    target, draft, _ = models
    with pytest.raises(ValueError, match=r"p must be \[3, vocab\]"):
        verify([1, 2], torch.full((2, 4), 0.25), torch.full((2, 4), 0.25))
    with pytest.raises(ValueError, match="gamma"):
        SpeculativeDecoder(target, draft, [0], gamma=0)
    with pytest.raises(ValueError, match="penalties"):
        SpeculativeDecoder(target, draft, [0], SamplingParams(repetition_penalty=1.2))
    with pytest.raises(ValueError, match="positions"):
        SpeculativeDecoder(target, draft, [0] * 200, max_new_tokens=100)
    other = tiny_llama(vocab_size=100)
    with pytest.raises(ValueError, match="share one tokenizer"):
        SpeculativeDecoder(target, other.to(target.device), [0])
    for params in (SamplingParams(presence_penalty=0.5), SamplingParams(frequency_penalty=0.5)):
        with pytest.raises(ValueError, match="penalties depend on the tokens generated so far"):
            SpeculativeDecoder(target, draft, [0], params)
    elsewhere = copy.deepcopy(draft).to("meta")  # the same model on another device
    with pytest.raises(ValueError, match=f"target is on {target.device} but draft on meta"):
        SpeculativeDecoder(target, elsewhere, [0])


class StandIn:
    """A stand-in for `Llama` on `device` that records the device of each input and the cache
    it was given, and returns all-zero logits on the CPU (greedy picks token 0). `meta`
    stands for a device other than the default one."""

    def __init__(self, vocab_size: int = 8, device: str = "meta") -> None:
        self.device = torch.device(device)
        self.config = SimpleNamespace(vocab_size=vocab_size, max_position_embeddings=128)
        self.calls: list[tuple[torch.device, object]] = []

    def make_cache(self, batch_size: int, max_len: int) -> SimpleNamespace:
        return SimpleNamespace(length=0, max_len=max_len)

    def __call__(self, ids: torch.Tensor, cache: object = None) -> torch.Tensor:
        self.calls.append((ids.device, cache))
        return torch.zeros(1, ids.shape[-1], self.config.vocab_size)


def test_a_draft_with_another_vocabulary_is_refused_in_full():
    with pytest.raises(
        ValueError,
        match=r"^draft vocabulary \(9\) differs from the target's \(8\): speculative "
        r"decoding needs both models to share one tokenizer$",
    ):
        SpeculativeDecoder(StandIn(vocab_size=8), StandIn(vocab_size=9), [1])


def test_a_new_decoder_is_not_done():
    assert SpeculativeDecoder(StandIn(), StandIn(), [1], GREEDY).done is False


def test_the_prefill_feeds_each_model_on_its_device_with_its_own_cache():
    target, draft = StandIn(), StandIn()
    decoder = SpeculativeDecoder(target, draft, [1, 2, 3], GREEDY)
    assert decoder.step() == [0]
    [(target_device, target_cache)] = target.calls
    [(draft_device, draft_cache)] = draft.calls
    assert target_device == draft_device == torch.device("meta")
    assert target_cache is decoder.target_cache and draft_cache is decoder.draft_cache


def test_the_draft_guesses_on_its_device_with_the_cache_given():
    draft, cache = StandIn(), object()
    tokens, q = speculative.propose(draft, cache, [1, 2], gamma=3, params=GREEDY)
    assert tokens == [0, 0, 0] and q.shape == (3, 8)
    assert [device for device, _ in draft.calls] == [torch.device("meta")] * 3
    assert all(given is cache for _, given in draft.calls)


def test_defaults_are_four_guesses_a_round_and_sixty_four_new_tokens(models):
    target, draft, _ = models
    decoder = SpeculativeDecoder(target, draft, [0])
    assert (decoder.gamma, decoder.max_new_tokens) == (4, 64)


def test_a_sequence_may_run_to_the_models_full_length(models):
    target, draft, _ = models
    limit = min(target.config.max_position_embeddings, draft.config.max_position_embeddings)
    decoder = SpeculativeDecoder(target, draft, [0] * (limit - 3), GREEDY, max_new_tokens=3)
    # the last token is emitted, never fed: the caches hold one position less than the limit
    assert decoder.target_cache.max_len == decoder.draft_cache.max_len == limit - 1
    assert len(list(decoder)) == 3


# --- statistics -----------------------------------------------------------------------------


def test_statistics_are_consistent(models, prompts):
    target, draft, _ = models
    gamma, max_new = 4, 50
    decoder = SpeculativeDecoder(
        target, draft, prompts[1], SamplingParams(temperature=0.8, seed=5), gamma, max_new
    )
    per_round = [len(decoder.step())]  # the prefill's token
    while not decoder.done:
        per_round.append(len(decoder.step()))
    stats = decoder.stats
    assert len(decoder.output) == max_new == sum(per_round)
    assert all(1 <= n <= gamma + 1 for n in per_round)
    assert stats.target_forwards == len(per_round) - 1
    # Each round emits its accepted guesses plus one token of the target's.
    assert len(decoder.output) == 1 + stats.accepted + stats.target_forwards
    assert stats.tokens_per_target_forward == (max_new - 1) / stats.target_forwards
    # At most one rejection per round; guesses after it are proposed but never checked.
    assert 0 <= stats.checked - stats.accepted <= stats.target_forwards
    assert stats.accepted <= stats.checked <= stats.draft_forwards <= gamma * stats.target_forwards
    assert 0 < stats.acceptance_rate < 1
    total = decode_prompts(target, draft, prompts[:2], decoder.params, gamma, max_new)
    assert total.target_forwards > stats.target_forwards
    with pytest.raises(ValueError, match="alpha is undefined"):
        _ = SpeculativeStats().acceptance_rate


def test_a_round_that_accepts_every_guess_checked_each_of_them():
    stats = SpeculativeStats()
    stats.record(gamma=4, accepted=4)  # all passed: four checked
    stats.record(gamma=4, accepted=1)  # the second failed: two checked, two never reached
    assert stats == SpeculativeStats(target_forwards=2, draft_forwards=8, checked=6, accepted=5)


def test_a_draft_that_is_the_target_has_every_guess_accepted(models, prompts):
    target, _, _ = models
    decoder = SpeculativeDecoder(target, target, prompts[0], GREEDY, gamma=3, max_new_tokens=20)
    list(decoder)
    assert decoder.stats.checked > 0 and decoder.stats.acceptance_rate == 1.0


def test_decode_prompts_runs_each_prompt_with_the_settings_given(models, prompts):
    target, draft, _ = models
    expected = SpeculativeStats()
    for prompt in prompts[:2]:
        decoder = SpeculativeDecoder(target, draft, prompt, GREEDY, gamma=2, max_new_tokens=7)
        list(decoder)
        expected += decoder.stats
    assert decode_prompts(target, draft, prompts[:2], GREEDY, 2, 7) == expected
    assert expected.accepted + expected.target_forwards == 2 * (7 - 1)  # after each prefill


def test_the_first_token_is_drawn_with_the_seeded_generator_too(models, prompts):
    target, draft, _ = models
    params = SamplingParams(temperature=2.0, seed=3)  # flat: a first token that varies
    firsts = []
    for global_seed in range(4):
        torch.manual_seed(global_seed)  # the global generator must not matter
        firsts += SpeculativeDecoder(target, draft, prompts[0], params, max_new_tokens=1).step()
    assert firsts == firsts[:1] * 4


def test_seeded_runs_reproduce(models, prompts):
    target, draft, _ = models
    params = SamplingParams(temperature=1.0, top_p=0.9, seed=11)
    first = list(SpeculativeDecoder(target, draft, prompts[2], params, gamma=3, max_new_tokens=30))
    again = list(SpeculativeDecoder(target, draft, prompts[2], params, gamma=3, max_new_tokens=30))
    assert first == again


def test_expected_values():
    assert expected_tokens_per_forward(1.0, 4) == 5
    assert expected_tokens_per_forward(0.0, 4) == 1
    for alpha, gamma in ((0.3, 1), (0.8, 4), (0.95, 8)):
        closed = (1 - alpha ** (gamma + 1)) / (1 - alpha)
        assert expected_tokens_per_forward(alpha, gamma) == pytest.approx(closed)
        assert expected_speedup(alpha, gamma, 0.0) == pytest.approx(closed)
        assert expected_speedup(alpha, gamma, 0.1, verify_cost=2.0) == pytest.approx(
            closed / (gamma * 0.1 + 2.0)
        )
    with pytest.raises(ValueError, match="alpha"):
        expected_tokens_per_forward(1.5, 2)
    with pytest.raises(ValueError, match="cost_ratio"):
        expected_speedup(0.5, 2, -0.1)
    assert expected_tokens_per_forward(0.5, 0) == 1  # no guesses: the target's token alone
    with pytest.raises(ValueError, match=r"gamma \(draft tokens per round\) must be >= 0, got -1"):
        expected_tokens_per_forward(0.5, -1)
    with pytest.raises(
        ValueError, match=r"verify_cost \(a ratio of two times\) must be > 0, got 0"
    ):
        expected_speedup(0.5, 2, 0.1, verify_cost=0.0)


def test_forward_steppers_repeat_without_growing_the_cache(models):
    target, *_ = models
    steppers = forward_steppers(target, context=8, widths=[1, 5])
    for width, step in steppers.items():
        assert step().shape == (1, width, target.config.vocab_size)
        step()  # a second call fits: the cache was rolled back
