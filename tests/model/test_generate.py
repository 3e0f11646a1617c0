"""The generation loop: streams tokens, stops where told, reproduces, reads as text."""

import inspect
import re

import pytest
import torch

from llmserve_ref.device import get_device
from llmserve_ref.model import corpus
from llmserve_ref.model.generate import generate
from llmserve_ref.model.sampling import SamplingParams
from llmserve_ref.model.weights import load_target

GREEDY = SamplingParams(temperature=0)


@pytest.fixture(scope="module")
def target():
    return load_target(get_device())


@pytest.fixture(scope="module")
def prompt(target):
    _, tokenizer = target
    return tokenizer.encode("Once upon a time,", add_bos=True)


def test_generate_is_a_lazy_stream_of_ints(target, prompt):
    model, _ = target
    stream = generate(model, prompt, GREEDY, max_new_tokens=5)
    assert inspect.isgenerator(stream)
    first = next(stream)
    assert isinstance(first, int)
    assert [first, *stream] == list(generate(model, prompt, GREEDY, max_new_tokens=5))


def test_max_new_tokens_and_stop_tokens(target, prompt):
    model, _ = target
    ten = list(generate(model, prompt, GREEDY, max_new_tokens=10))
    assert len(ten) == 10
    # Make the fourth greedy token a stop token: the stream ends right after yielding it.
    stopped = list(generate(model, prompt, GREEDY, max_new_tokens=10, stop_token_ids={ten[3]}))
    assert stopped == ten[: ten.index(ten[3]) + 1]


@torch.no_grad()
def test_cached_greedy_loop_equals_recomputing_everything(target, prompt):
    model, _ = target
    ids = list(prompt)
    for _ in range(16):  # the loop without a cache: re-run the whole sequence every step
        logits = model(torch.tensor([ids], device=model.device))[0, -1]
        ids.append(int(logits.argmax()))
    assert list(generate(model, prompt, GREEDY, max_new_tokens=16)) == ids[len(prompt) :]


def test_seeded_sampling_reproduces(target, prompt):
    model, _ = target
    params = SamplingParams(temperature=1.0, top_p=0.95, seed=123)
    first = list(generate(model, prompt, params, max_new_tokens=40))
    assert first == list(generate(model, prompt, params, max_new_tokens=40))
    other = SamplingParams(temperature=1.0, top_p=0.95, seed=124)
    assert first != list(generate(model, prompt, other, max_new_tokens=40))


def test_an_explicit_generator_overrides_the_seed(target, prompt):
    model, _ = target
    generator = torch.Generator(model.device).manual_seed(5)
    explicit = list(generate(model, prompt, SamplingParams(seed=1), 30, generator=generator))
    assert explicit == list(generate(model, prompt, SamplingParams(seed=5), 30))
    assert explicit != list(generate(model, prompt, SamplingParams(seed=1), 30))


def test_the_target_writes_words_from_its_corpus(target, prompt):
    model, tokenizer = target
    ids = list(
        generate(
            model,
            prompt,
            SamplingParams(seed=0),
            max_new_tokens=120,
            stop_token_ids={tokenizer.eos_id},
        )
    )
    text = tokenizer.decode(ids, skip_special_tokens=True)
    known = set(re.findall(r"\w+", " ".join(corpus.train_documents(2000))))
    words = re.findall(r"\w+", text)
    assert len(words) >= 15
    assert sum(w in known for w in words) / len(words) >= 0.95, text


def test_invalid_requests_raise(target):
    model, _ = target
    with pytest.raises(ValueError, match="the prompt is empty"):
        next(generate(model, [], GREEDY))
    with pytest.raises(ValueError, match=r"max_tokens \(new tokens to generate\) must be >= 1"):
        next(generate(model, [0], GREEDY, max_new_tokens=0))
    vocab = model.config.vocab_size
    with pytest.raises(ValueError, match=rf"ids \[{vocab}\] are outside the vocabulary"):
        next(generate(model, [0, vocab], GREEDY))
    limit = model.config.max_position_embeddings
    assert len(list(generate(model, [0, 5], GREEDY, max_new_tokens=3))) == 3
    # vLLM's rule: prompt + max_tokens may fill the model length, not one token more.
    next(generate(model, [0, 5], GREEDY, max_new_tokens=limit - 2))
    with pytest.raises(ValueError, match=f"2 prompt tokens \\+ {limit - 1} max_tokens exceed"):
        next(generate(model, [0, 5], GREEDY, max_new_tokens=limit - 1))
