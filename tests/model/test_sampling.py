"""The samplers: the right tokens survive, edge cases are defined, seeds reproduce."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from llmserve_ref.model.sampling import (
    MAX_LOGPROBS,
    SamplingParamError,
    SamplingParams,
    frequency_presence_penalty,
    greedy,
    logit_bias,
    min_p,
    next_token,
    process_logits,
    repetition_penalty,
    sample,
    temperature,
    token_logprobs,
    top_k,
    top_p,
)

# Probabilities 0.5, 0.3, 0.15, 0.05 as logits, shuffled so order is not index order.
PROBS = torch.tensor([0.15, 0.5, 0.05, 0.3])
LOGITS = PROBS.log()


def kept(logits: torch.Tensor) -> set[int]:
    return set(torch.nonzero(logits > float("-inf")).flatten().tolist())


def test_greedy_picks_argmax_and_lowest_id_on_ties():
    assert int(greedy(LOGITS)) == 1
    assert int(greedy(torch.zeros(5))) == 0
    assert greedy(torch.tensor([[0.0, 1.0], [3.0, 2.0]])).tolist() == [1, 0]


def test_temperature_scales_logits():
    assert torch.equal(temperature(LOGITS, 2.0), LOGITS / 2)
    assert torch.equal(temperature(LOGITS, 1.0), LOGITS)


def test_temperature_zero_is_greedy():
    assert kept(temperature(LOGITS, 0)) == {1}
    assert kept(temperature(torch.zeros(4), 0)) == {0}
    probs = process_logits(LOGITS, SamplingParams(temperature=0)).softmax(-1)
    assert all(int(sample(probs, torch.Generator().manual_seed(s))) == 1 for s in range(20))


@pytest.mark.parametrize(("k", "expected"), [(1, {1}), (2, {1, 3}), (3, {0, 1, 3})])
def test_top_k_keeps_the_k_largest(k, expected):
    out = top_k(LOGITS, k)
    assert kept(out) == expected
    assert torch.equal(out[list(expected)], LOGITS[list(expected)])


@pytest.mark.parametrize("k", [4, 5, 1000])
def test_top_k_at_or_beyond_vocab_is_identity(k):
    assert torch.equal(top_k(LOGITS, k), LOGITS)


@pytest.mark.parametrize(("p", "expected"), [(0.4, {1}), (0.75, {1, 3}), (0.85, {0, 1, 3})])
def test_top_p_keeps_the_nucleus(p, expected):
    assert kept(top_p(LOGITS, p)) == expected


def test_top_p_one_is_identity():
    tiny_tail = torch.tensor([30.0, 0.0, -10.0, -20.0])  # cumulative mass hits 1.0 early
    assert torch.equal(top_p(tiny_tail, 1.0), tiny_tail)
    assert torch.equal(top_p(LOGITS, 1.0), LOGITS)


@pytest.mark.parametrize(("p", "expected"), [(0.0, {0, 1, 2, 3}), (0.5, {1, 3}), (1.0, {1})])
def test_min_p_keeps_tokens_near_the_top(p, expected):
    # Threshold p × 0.5: 0.25 keeps 0.5 and 0.3; 1.0 keeps only the top.
    assert kept(min_p(LOGITS, p)) == expected


def test_all_equal_logits():
    flat = torch.zeros(4)
    assert kept(top_k(flat, 1)) == {0, 1, 2, 3}  # all tie with the k-th, all kept
    assert kept(min_p(flat, 1.0)) == {0, 1, 2, 3}
    assert kept(top_p(flat, 0.5)) == {0, 1}  # ties broken by lower id
    assert kept(temperature(flat, 0)) == {0}
    probs = process_logits(flat, SamplingParams()).softmax(-1)
    assert torch.allclose(probs, torch.full((4,), 0.25))


def test_batched_logits_are_processed_row_by_row():
    batch = torch.stack([LOGITS, LOGITS.flip(0), torch.zeros(4)])
    params = SamplingParams(temperature=0.7, top_k=3, top_p=0.8, min_p=0.1)
    together = process_logits(batch, params)
    for row in range(3):
        assert torch.equal(together[row], process_logits(batch[row], params))


def test_process_logits_applies_min_p_before_top_p_as_vllm_v1_does():
    # vLLM 0.32.0 (V1 Sampler): temperature, min-p, then top-k/top-p. Min-p 0.5 keeps
    # 0.5 and 0.3 (threshold 0.25); renormalized they are 0.625 and 0.375, so top-p 0.6
    # stops after the first. In the other order (Hugging Face, vLLM V0) top-p 0.6 sees
    # 0.5 < 0.6 above the 0.3 token and keeps it, and min-p keeps it too.
    params = SamplingParams(top_p=0.6, min_p=0.5)
    assert kept(process_logits(LOGITS, params)) == {1}
    assert kept(top_p(min_p(LOGITS, 0.5), 0.6)) == {1}
    assert kept(min_p(top_p(LOGITS, 0.6), 0.5)) == {1, 3}  # the order this test rules out


def test_min_p_and_top_k_commute():
    # Truncation keeps every kept token's ratio to the top one, so min-p's cut is unchanged.
    for k in (1, 2, 3, 4):
        for m in (0.1, 0.4, 0.7):
            assert kept(top_k(min_p(LOGITS, m), k)) == kept(min_p(top_k(LOGITS, k), m))


def test_min_p_measures_each_row_against_its_own_top_token():
    batch = torch.stack([LOGITS, torch.tensor([0.0, 0.0, 0.0, 0.0])])  # row 1: flat
    out = min_p(batch, 0.6)  # row 0 keeps p >= 0.3; row 1 all (0.25 >= 0.15), not none
    assert kept(out[0]) == {1, 3} and kept(out[1]) == {0, 1, 2, 3}


def test_repetition_penalty_ctrl_convention():
    logits = torch.tensor([2.0, -2.0, 1.0])
    out = repetition_penalty(logits, torch.tensor([0, 1, 1]), 2.0)
    assert out.tolist() == [1.0, -4.0, 1.0]  # positive divided, negative multiplied, once
    assert torch.equal(repetition_penalty(logits, torch.tensor([], dtype=torch.long), 2.0), logits)
    assert logits.tolist() == [2.0, -2.0, 1.0]  # input untouched
    assert repetition_penalty(logits, torch.tensor([0]), 2.0).tolist() == [1.0, -2.0, 1.0]


def test_frequency_and_presence_penalties_openai_convention():
    out = frequency_presence_penalty(torch.zeros(3), torch.tensor([1, 1, 2]), 0.5, 0.25)
    assert out.tolist() == [0.0, -1.25, -0.75]
    # in the logits' own precision: float64 logits get 0.3 as a float64
    doubles = frequency_presence_penalty(
        torch.zeros(2, dtype=torch.float64), torch.tensor([0]), 0, 0.3
    )
    assert doubles.dtype == torch.float64 and doubles.tolist() == [-0.3, 0.0]


def test_process_logits_penalises_prompt_only_for_repetition_penalty():
    logits = torch.ones(4)
    prompt, output = torch.tensor([0]), torch.tensor([1])
    params = SamplingParams(repetition_penalty=2.0, presence_penalty=1.0)
    assert process_logits(logits, params, prompt, output).tolist() == [0.5, -0.5, 1.0, 1.0]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"temperature": -0.1}, r"temperature must be in \[0, 2\]"),
        ({"top_k": 0}, "top_k must be an integer >= 1"),
        ({"top_p": 0.0}, r"top_p must be in \(0, 1\]"),
        ({"top_p": 1.5}, r"top_p must be in \(0, 1\]"),
        ({"min_p": -0.1}, r"min_p must be in \[0, 1\]"),
        ({"min_p": 1.1}, r"min_p must be in \[0, 1\]"),
        ({"repetition_penalty": 0.0}, "repetition_penalty must be > 0"),
        ({"frequency_penalty": 2.5}, "frequency_penalty must be between -2.0 and 2.0"),
        ({"presence_penalty": -3.0}, "presence_penalty must be between -2.0 and 2.0"),
        ({"logit_bias": {5: 100.5}}, r"logit_bias maps .* to a bias in \[-100, 100\]"),
        ({"logit_bias": {-1: 1.0}}, r"logit_bias maps token ids \(>= 0\)"),
        ({"min_tokens": -1}, "min_tokens must be >= 0"),
        ({"logprobs": -1}, r"logprobs must be in \[0, 20\]"),
        ({"logprobs": 21}, r"logprobs must be in \[0, 20\]"),
    ],
)
def test_invalid_params_say_what_is_allowed(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(**kwargs)


def test_each_range_includes_its_ends_and_an_error_names_its_field():
    SamplingParams(frequency_penalty=-2.0, presence_penalty=2.0, logprobs=0)
    SamplingParams(frequency_penalty=2.0, presence_penalty=-2.0, logprobs=MAX_LOGPROBS)
    SamplingParams(logit_bias={0: -100.0, 1: 100.0})
    for kwargs, field in [
        ({"logit_bias": {0: -100.5}}, "logit_bias"),
        ({"repetition_penalty": math.inf}, "repetition_penalty"),
        ({"top_p": 0.0}, "top_p"),
    ]:
        with pytest.raises(SamplingParamError) as refused:
            SamplingParams(**kwargs)
        assert refused.value.field == field


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: temperature(LOGITS, -1.0), "temperature"),
        (lambda: top_k(LOGITS, 0), "top_k"),
        (lambda: top_p(LOGITS, 0.0), "top_p"),
        (lambda: min_p(LOGITS, 2.0), "min_p"),
        (lambda: repetition_penalty(LOGITS, torch.tensor([0]), -1.0), "repetition_penalty"),
    ],
)
def test_sampler_functions_validate_too(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_seeded_sampling_reproduces_exactly():
    probs = torch.full((50,), 1 / 50)
    draws = [
        [int(sample(probs, g)) for _ in range(30)]
        for g in (torch.Generator().manual_seed(7), torch.Generator().manual_seed(7))
    ]
    other = [int(sample(probs, torch.Generator().manual_seed(8))) for _ in range(30)]
    assert draws[0] == draws[1]
    assert draws[0] != other


def test_sample_follows_the_distribution_and_never_picks_masked_tokens():
    probs = process_logits(LOGITS, SamplingParams(top_k=3)).softmax(-1)
    g = torch.Generator().manual_seed(0)
    draws = sample(probs.expand(20_000, 4), g)
    freq = torch.bincount(draws, minlength=4).float() / len(draws)
    assert freq[2] == 0  # masked by top-k
    assert torch.allclose(freq, probs, atol=0.015)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    values=st.lists(st.floats(-20, 20), min_size=1, max_size=30),
    k=st.integers(1, 40),
    p=st.floats(0.01, 1.0),
    m=st.floats(0.0, 1.0),
)
def test_truncation_keeps_the_argmax_and_leaves_kept_logits_unchanged(values, k, p, m):
    logits = torch.tensor(values)
    for out in (top_k(logits, k), top_p(logits, p), min_p(logits, m)):
        keep = out > float("-inf")
        assert keep[int(greedy(logits))]
        assert torch.equal(out[keep], logits[keep])
    assert len(kept(top_k(logits, k))) >= min(k, len(values))
    probs = logits.softmax(-1)
    assert probs[list(kept(top_p(logits, p)))].sum() >= p - 1e-5


def test_sampling_params_defaults_leave_logits_alone():
    assert torch.equal(process_logits(LOGITS, SamplingParams()), LOGITS)
    assert math.isclose(
        float(process_logits(LOGITS, SamplingParams()).softmax(-1)[1]), 0.5, rel_tol=1e-6
    )


def test_logit_bias_adds_to_the_listed_logits_only():
    biased = logit_bias(LOGITS, {0: 2.0, 3: -1.5})
    assert torch.equal(biased, LOGITS + torch.tensor([2.0, 0.0, 0.0, -1.5]))
    batch = torch.stack([LOGITS, LOGITS.flip(0)])
    assert torch.equal(logit_bias(batch, {2: 1.0})[:, 2], batch[:, 2] + 1.0)
    doubles = logit_bias(torch.zeros(2, dtype=torch.float64), {1: 0.3})
    assert doubles.dtype == torch.float64 and doubles.tolist() == [0.0, 0.3]


def test_logit_bias_can_ban_or_force_a_token_even_when_greedy():
    greedy_params = SamplingParams(temperature=0)
    assert next_token(LOGITS[None], greedy_params) == 1  # the 0.5 token
    ban = SamplingParams(temperature=0, logit_bias={1: -100.0})
    assert next_token(LOGITS[None], ban) == 3  # the 0.3 token, now the likeliest
    force = SamplingParams(temperature=1.0, logit_bias={2: 100.0})
    g = torch.Generator().manual_seed(0)
    assert {next_token(LOGITS[None], force, generator=g) for _ in range(50)} == {2}


def test_min_tokens_bans_the_stop_tokens_until_enough_are_out():
    stop = {1}  # the likeliest token stands for the end-of-sequence token
    params = SamplingParams(temperature=1.0, min_tokens=3)
    g = torch.Generator().manual_seed(0)
    for n in range(3):
        output = torch.zeros((1, n), dtype=torch.long)
        processed = process_logits(LOGITS[None], params, output_ids=output, stop_token_ids=stop)
        assert processed[0, 1] == float("-inf") and kept(processed[0]) == {0, 2, 3}
        assert all(next_token(LOGITS[None], params, (), [0] * n, g, stop) != 1 for _ in range(50))
    enough = torch.zeros((1, 3), dtype=torch.long)
    assert torch.equal(process_logits(LOGITS[None], params, None, enough, stop), LOGITS[None])
    # Without stop tokens (ignore_eos) there is nothing to ban.
    assert torch.equal(process_logits(LOGITS[None], params), LOGITS[None])


def test_logit_bias_on_a_token_the_model_lacks_is_refused():
    SamplingParams(logit_bias={3: 1.0}).check_vocab(4)
    with pytest.raises(ValueError, match=r"logit_bias has token ids outside .*\[4, 9\]"):
        SamplingParams(logit_bias={4: 1.0, 9: -1.0, 0: 1.0}).check_vocab(4)


def test_token_logprobs_are_the_raw_log_softmax_with_the_likeliest_first():
    torch.manual_seed(0)
    logits = torch.randn(3, 50)
    rows = token_logprobs(logits, [7, 0, 49], [0, 2, 5])
    expected = torch.log_softmax(logits.double(), dim=-1)
    for row, token, k, lp in zip(rows, [7, 0, 49], [0, 2, 5], expected, strict=True):
        assert math.isclose(row.logprob, float(lp[token]), abs_tol=1e-5)
        assert len(row.top) == k
        assert [i for i, _ in row.top] == lp.argsort(descending=True)[:k].tolist()
        assert all(math.isclose(v, float(lp[i]), abs_tol=1e-5) for i, v in row.top)


def test_next_token_penalises_the_prompt_and_the_output_it_is_given():
    logits = torch.tensor([[1.0, 0.9, 0.0]])
    params = SamplingParams(temperature=0, repetition_penalty=2.0)
    assert next_token(logits, params) == 0  # nothing seen, no ids at all: the argmax
    assert next_token(logits, params, prompt_ids=[0]) == 1  # 1.0 / 2 falls below 0.9
    assert next_token(logits, params, output_ids=[0]) == 1


def test_next_token_is_greedy_only_at_temperature_zero_and_draws_with_the_generator():
    logits = torch.tensor([[0.0, 0.1, -0.1, 0.05]])
    probs = logits.softmax(dim=-1)
    seeded = [
        next_token(logits, SamplingParams(), generator=torch.Generator().manual_seed(seed))
        for seed in range(20)
    ]  # one draw each from the model's distribution, with the generator given
    assert seeded == [int(sample(probs, torch.Generator().manual_seed(s))[0]) for s in range(20)]
    assert len(set(seeded)) > 1  # at temperature 1, not always the argmax
    assert next_token(logits, SamplingParams(temperature=0)) == 1


def test_token_logprobs_of_no_rows_and_of_mismatched_lists():
    assert token_logprobs(torch.zeros(0, 5), [], []) == []
    with pytest.raises(ValueError):
        token_logprobs(torch.zeros(2, 5), [1, 2], [1])


def test_an_empty_bias_and_an_empty_logprob_batch_are_no_ops():
    # torch.tensor([]) is float32 unless told otherwise, and float ids cannot index
    logits = torch.tensor([[0.0, 1.0, 2.0]])
    assert torch.equal(logit_bias(logits, {}), logits)
    assert token_logprobs(logits, [], []) == []


def test_index_tensors_are_made_on_the_logits_device():
    # with meta as the default device, a tensor made without device= would land there
    logits = torch.tensor([[0.0, 1.0, 2.0, 3.0]])
    with torch.device("meta"):
        biased = logit_bias(logits, {1: 5.0})
        logprobs = token_logprobs(logits, [2], [1])
    assert biased.tolist() == [[0.0, 6.0, 2.0, 3.0]]
    assert logprobs[0].top[0][0] == 3 and math.isclose(
        logprobs[0].logprob, float(logits.log_softmax(-1)[0, 2]), rel_tol=1e-6
    )


def test_next_token_makes_the_ids_it_penalizes_on_the_logits_device(monkeypatch):
    """The prompt's and the output's ids become tensors where the logits are (on a GPU, CPU
    ids would fail in the penalties): both name the logits' device."""
    logits = torch.tensor([[0.0, 1.0, 2.0]])
    made, tensor = [], torch.tensor

    def spy(data, *args, **kwargs):
        made.append(kwargs.get("device", "not given"))
        return tensor(data, *args, **kwargs)

    monkeypatch.setattr(torch, "tensor", spy)
    params = SamplingParams(temperature=0, repetition_penalty=1.2)
    assert next_token(logits, params, prompt_ids=[0, 1], output_ids=[2]) == 2
    assert made[:2] == [logits.device, logits.device]
