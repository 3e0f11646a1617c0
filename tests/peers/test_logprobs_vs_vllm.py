"""vLLM's logprobs, logit_bias, min_tokens and echo against ours, on the same model files.

Both servers run the tiny model in float32, so a greedy request takes the same tokens on
both (tests/peers/test_greedy_vs_vllm.py), and their logprobs, the model's own
log-softmax before any sampler (vLLM's default ``logprobs_mode="raw_logprobs"``), agree
to float32 noise. Where a test compares texts, the field under test decided them.
"""

from __future__ import annotations

import httpx
import pytest

from . import servers

if not servers.HAVE_VLLM:
    pytest.skip(servers.NEEDS_VLLM, allow_module_level=True)

TOLERANCE = 1e-3
PROMPTS = [
    "Once upon a time,",
    "Mia had a red ball.",
    "Sam and Lily went to the park. They saw a big dog with a red ball. Sam wanted to "
    "play with the dog, but Lily was scared. The dog ran to them and",
]
STORY = [{"role": "user", "content": "Tell me a story."}]


def post(server: servers.Server, path: str, body: dict) -> dict:
    body = {"model": servers.MODEL_NAME, "temperature": 0, **body}
    response = httpx.post(f"{server.url}{path}", json=body, timeout=120)
    assert response.status_code == 200, f"{server.name} {path}: {response.text[:500]}"
    return response.json()


def assert_close_top(mine: dict[str, float], theirs: dict[str, float]) -> None:
    """Two maps token -> logprob: the same values, and the same logprob for a shared token
    (a near-tie at the last place may swap which token is listed)."""
    assert sorted(mine.values()) == pytest.approx(sorted(theirs.values()), abs=TOLERANCE)
    for token in mine.keys() & theirs.keys():
        assert mine[token] == pytest.approx(theirs[token], abs=TOLERANCE)


@pytest.mark.parametrize("prompt", PROMPTS)
def test_completion_logprobs(prompt, vllm, ours):
    body = {"prompt": prompt, "max_tokens": 16, "logprobs": 5}
    theirs = post(vllm, "/v1/completions", body)["choices"][0]
    mine = post(ours, "/v1/completions", body)["choices"][0]
    assert mine["text"] == theirs["text"]
    a, b = mine["logprobs"], theirs["logprobs"]
    assert a["tokens"] == b["tokens"] and a["text_offset"] == b["text_offset"]
    assert a["token_logprobs"] == pytest.approx(b["token_logprobs"], abs=TOLERANCE)
    for top_mine, top_theirs in zip(a["top_logprobs"], b["top_logprobs"], strict=True):
        assert_close_top(top_mine, top_theirs)
    worst = max(abs(x - y) for x, y in zip(a["token_logprobs"], b["token_logprobs"], strict=True))
    print(f"\n{prompt[:30]!r}: {len(a['tokens'])} tokens, largest logprob gap {worst:.1e}")


def test_chat_logprobs(vllm, ours):
    body = {"messages": STORY, "max_tokens": 16, "logprobs": True, "top_logprobs": 5}
    theirs = post(vllm, "/v1/chat/completions", body)["choices"][0]
    mine = post(ours, "/v1/chat/completions", body)["choices"][0]
    assert mine["message"]["content"] == theirs["message"]["content"]
    a, b = mine["logprobs"]["content"], theirs["logprobs"]["content"]
    assert [t["token"] for t in a] == [t["token"] for t in b]
    assert [t["bytes"] for t in a] == [t["bytes"] for t in b]
    assert [t["logprob"] for t in a] == pytest.approx([t["logprob"] for t in b], abs=TOLERANCE)
    for x, y in zip(a, b, strict=True):
        assert_close_top(
            {t["token"]: t["logprob"] for t in x["top_logprobs"]},
            {t["token"]: t["logprob"] for t in y["top_logprobs"]},
        )


def test_logprobs_are_raw_whatever_the_logit_bias(vllm, ours):
    """A +100 bias forces " fox" every time; both report the model's own logprob of it,
    not the biased one (which would be about 0)."""
    fox = post(vllm, "/tokenize", {"prompt": " fox", "add_special_tokens": False})["tokens"]
    assert len(fox) == 1, "the test needs a word that is one token"
    body = {"prompt": PROMPTS[0], "max_tokens": 4, "logprobs": 1, "logit_bias": {fox[0]: 100}}
    theirs = post(vllm, "/v1/completions", body)["choices"][0]
    mine = post(ours, "/v1/completions", body)["choices"][0]
    assert mine["text"] == theirs["text"] == " fox" * 4
    a, b = mine["logprobs"]["token_logprobs"], theirs["logprobs"]["token_logprobs"]
    assert a == pytest.approx(b, abs=TOLERANCE)
    assert min(a) < -1.0  # the model would not have said " fox" there


def test_min_tokens_changes_the_text_as_vllms_does(vllm, ours):
    body = {"messages": STORY, "max_tokens": 200, "return_token_ids": True}
    ended = post(vllm, "/v1/chat/completions", body)["choices"][0]
    assert ended["finish_reason"] == "stop", "the test needs a reply that ends"
    n = len(ended["token_ids"])
    body = {"messages": STORY, "max_tokens": n + 8, "min_tokens": n + 4}
    theirs = post(vllm, "/v1/chat/completions", body)
    mine = post(ours, "/v1/chat/completions", body)
    text = theirs["choices"][0]["message"]["content"]
    assert mine["choices"][0]["message"]["content"] == text != ended["message"]["content"]
    assert mine["usage"]["completion_tokens"] == theirs["usage"]["completion_tokens"] >= n + 4


def test_logit_bias_changes_the_text_as_vllms_does(vllm, ours):
    body = {"prompt": PROMPTS[0], "max_tokens": 12, "return_token_ids": True}
    free = post(vllm, "/v1/completions", body)["choices"][0]
    body = {"prompt": PROMPTS[0], "max_tokens": 12, "logit_bias": {free["token_ids"][0]: -100}}
    theirs = post(vllm, "/v1/completions", body)["choices"][0]["text"]
    assert post(ours, "/v1/completions", body)["choices"][0]["text"] == theirs != free["text"]


def test_echo(vllm, ours):
    body = {"prompt": PROMPTS[1], "max_tokens": 8, "echo": True}
    theirs = post(vllm, "/v1/completions", body)["choices"][0]["text"]
    assert post(ours, "/v1/completions", body)["choices"][0]["text"] == theirs
    assert theirs.startswith(PROMPTS[1])
