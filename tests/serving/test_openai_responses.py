"""The answers' shapes: usage with cached tokens, llama.cpp's timings, the two logprobs shapes."""

from __future__ import annotations

import pytest

from llmserve_ref.engine.interface import Timings
from llmserve_ref.model.sampling import TokenLogprobs
from llmserve_ref.model.tokenizer import Tokenizer
from llmserve_ref.model.weights import TARGET_DIR
from llmserve_ref.serving.openai_responses import (
    ResponseHead,
    chat_logprobs,
    completion_logprobs,
    completion_object,
    timings,
    token_text,
    usage,
)


@pytest.fixture(scope="module")
def tokenizer():
    return Tokenizer.from_file(TARGET_DIR)


def test_usage_and_timings():
    assert usage(10, 3, 8) == {
        "prompt_tokens": 10,
        "completion_tokens": 3,
        "total_tokens": 13,
        "prompt_tokens_details": {"cached_tokens": 8},
    }
    t = timings(Timings(prompt_n=4, prompt_ms=8.0, predicted_n=10, predicted_ms=50.0))
    assert (t["prompt_per_token_ms"], t["prompt_per_second"]) == (2.0, 500.0)
    assert (t["predicted_per_token_ms"], t["predicted_per_second"]) == (5.0, 200.0)
    assert timings(Timings(0, 0.0, 0, 0.0))["predicted_per_second"] == 0.0  # no division by 0


def test_an_object_carries_its_kind_and_extra_fields():
    obj = completion_object("chat.completion.chunk", ResponseHead("id", 1, "tiny"), [], usage=None)
    assert list(obj) == ["id", "object", "created", "model", "choices", "usage"]


def test_a_split_character_shows_as_replacement_but_its_bytes_are_exact(tokenizer):
    first, second = (tokenizer.backend.token_to_id(c) for c in ("Ã", "©"))  # é's two bytes
    lp = TokenLogprobs(-1.0, [(first, -1.0), (second, -2.0)])
    chat = chat_logprobs([(first, lp), (second, lp)], tokenizer)["content"]
    assert [c["token"] for c in chat] == ["�", "�"]
    assert bytes(chat[0]["bytes"] + chat[1]["bytes"]).decode() == "é"
    assert [t["logprob"] for t in chat[0]["top_logprobs"]] == [-1.0, -2.0]


def test_completion_logprobs_count_text_offsets_from_where_they_start(tokenizer):
    ids = tokenizer.encode(" a cat")
    lps = [(t, TokenLogprobs(-0.1, [(t, -0.1)])) for t in ids]
    body = completion_logprobs(lps, tokenizer, text_offset=5)
    assert body["tokens"] == [token_text(tokenizer, t) for t in ids] == [" a", " cat"]
    assert body["text_offset"] == [5, 7]
    assert body["top_logprobs"][1] == {" cat": -0.1}
