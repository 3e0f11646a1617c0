"""The sampling fields beyond the basics, as the official client sends and reads them.

``logprobs`` (chat: with ``top_logprobs``; completions: OpenAI's legacy shape),
``logit_bias``, vLLM's ``min_tokens`` and the completions API's ``echo``, whole and
streamed. That the numbers are the model's own is tested on the engine
(tests/engine/test_engine_core.py) and against vLLM (tests/peers/test_logprobs_vs_vllm.py).
"""

from __future__ import annotations

import json
import math

import httpx
import pytest

from llmserve_ref.model.sampling import SamplingParams
from llmserve_ref.serving.chat_requests import ChatCompletionRequest
from llmserve_ref.serving.openai_parsing import parse
from llmserve_ref.serving.openai_requests import SAMPLER_FIELDS, CompletionRequest

STORY = [{"role": "user", "content": "Tell me a story about a fox."}]
PROMPT = "Once upon a time,"


def streamed(stream) -> tuple[str, list]:
    """The text and the logprobs entries of a streamed choice 0, joined."""
    text, entries = "", []
    for chunk in stream:
        for c in chunk.choices:
            text += (c.delta.content or "") if hasattr(c, "delta") else c.text
            if c.logprobs is not None:
                entries.append(c.logprobs)
    return text, entries


def test_chat_logprobs_give_each_token_its_text_bytes_logprob_and_likeliest(client):
    args = dict(model="tiny", messages=STORY, max_tokens=12, temperature=0, logprobs=True)
    reply = client.chat.completions.create(**args, top_logprobs=3)
    content = reply.choices[0].logprobs.content
    assert len(content) == reply.usage.completion_tokens == 12
    assert b"".join(bytes(t.bytes) for t in content).decode() == reply.choices[0].message.content
    for t in content:
        assert len(t.top_logprobs) == 3 and t.logprob <= 0
        values = [a.logprob for a in t.top_logprobs]
        assert values == sorted(values, reverse=True) and sum(map(math.exp, values)) <= 1 + 1e-5
        assert (t.top_logprobs[0].token, t.top_logprobs[0].logprob) == (t.token, t.logprob)
    text, chunks = streamed(client.chat.completions.create(**args, top_logprobs=3, stream=True))
    assert text == reply.choices[0].message.content
    streamed_content = [t for lp in chunks for t in lp.content]
    assert [t.token for t in streamed_content] == [t.token for t in content]
    assert [t.logprob for t in streamed_content] == pytest.approx(
        [t.logprob for t in content], abs=1e-5
    )
    # logprobs without top_logprobs: the tokens' own, no alternatives.
    bare = client.chat.completions.create(**args).choices[0].logprobs.content
    assert [t.token for t in bare] == [t.token for t in content]
    assert all(t.top_logprobs == [] for t in bare)
    assert client.chat.completions.create(**{**args, "logprobs": False}).choices[0].logprobs is None


def test_completion_logprobs_have_openais_legacy_shape(client):
    args = dict(model="tiny", prompt=PROMPT, max_tokens=10, temperature=0, logprobs=2)
    reply = client.completions.create(**args)
    lp = reply.choices[0].logprobs
    assert "".join(lp.tokens) == reply.choices[0].text
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 10
    assert lp.text_offset == [sum(map(len, lp.tokens[:i])) for i in range(10)]
    for token, logprob, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, strict=True):
        assert top[token] == logprob and len(top) <= 3  # the token and the 2 likeliest
        assert max(top.values()) == logprob  # greedy: the likeliest
    text, chunks = streamed(client.completions.create(**args, stream=True))
    assert text == reply.choices[0].text
    assert [t for c in chunks for t in c.tokens] == lp.tokens
    assert [o for c in chunks for o in c.text_offset] == lp.text_offset
    assert [x for c in chunks for x in c.token_logprobs] == pytest.approx(
        lp.token_logprobs, abs=1e-5
    )


def test_logit_bias_bans_or_forces_tokens(server, client):
    tokenizer = server.engine.tokenizer
    args = dict(model="tiny", prompt=PROMPT, max_tokens=4, temperature=0)
    first = tokenizer.encode(client.completions.create(**args).choices[0].text)[0]
    banned = client.completions.create(**args, logit_bias={str(first): -100})
    assert tokenizer.encode(banned.choices[0].text)[0] != first
    fox = tokenizer.encode(" fox")
    assert len(fox) == 1, "the test needs a word that is one token"
    forced = client.completions.create(**args, logit_bias={str(fox[0]): 100})
    assert forced.choices[0].text == " fox" * 4


def test_min_tokens_keeps_the_end_of_sequence_token_away(client):
    args = dict(model="tiny", messages=STORY, max_tokens=200, temperature=0)
    ended = client.chat.completions.create(**args)
    assert ended.choices[0].finish_reason == "stop", "the test needs a reply that ends"
    n = ended.usage.completion_tokens
    longer = client.chat.completions.create(**args, extra_body={"min_tokens": n + 5})
    assert longer.usage.completion_tokens >= n + 5
    assert longer.choices[0].message.content.startswith(ended.choices[0].message.content)


def test_echo_puts_the_prompt_before_each_choice(client):
    args = dict(model="tiny", max_tokens=6, temperature=0)
    plain = client.completions.create(**args, prompt=PROMPT).choices[0].text
    echoed = client.completions.create(**args, prompt=PROMPT, echo=True, n=2)
    assert [c.text for c in echoed.choices] == [PROMPT + plain] * 2
    text, _ = streamed(client.completions.create(**args, prompt=PROMPT, echo=True, stream=True))
    assert text == PROMPT + plain
    ids = [0, 348, 352]  # a prompt of token ids is echoed as its text
    by_ids = client.completions.create(**args, prompt=ids, echo=True).choices[0].text
    assert by_ids.endswith(client.completions.create(**args, prompt=ids).choices[0].text)
    assert len(by_ids) > len(client.completions.create(**args, prompt=ids).choices[0].text)


BAD_FIELDS = [
    ("chat/completions", {"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ("chat/completions", {"top_logprobs": 2}, "top_logprobs"),
    ("completions", {"logprobs": 6}, "logprobs"),
    ("completions", {"logprobs": 1, "echo": True}, "logprobs"),
    ("completions", {"logit_bias": {"5": 101}}, "logit_bias"),
    ("completions", {"logit_bias": {"fox": 1}}, "logit_bias.fox"),
    ("completions", {"logit_bias": {"99999": 1}}, "logit_bias"),
    ("chat/completions", {"min_tokens": -1}, "min_tokens"),
]


@pytest.mark.parametrize(("endpoint", "fields", "param"), BAD_FIELDS)
def test_bad_values_get_an_openai_error_naming_the_field(server, client, endpoint, fields, param):
    prompt = {"messages": STORY} if endpoint.startswith("chat") else {"prompt": PROMPT}
    body = {"model": "tiny", "max_tokens": 2, **prompt, **fields}
    response = httpx.post(f"{server.url}/v1/{endpoint}", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["param"], error["code"]) == (param, "invalid_value")
    assert param.split(".")[0] in error["message"]
    ok = client.completions.create(model="tiny", prompt="Once", max_tokens=2)
    assert ok.usage.completion_tokens == 2


# Every sampler knob a request sets by name, each away from its default.
KNOBS = {
    "temperature": 0.5,
    "top_k": 5,
    "top_p": 0.9,
    "min_p": 0.1,
    "repetition_penalty": 1.1,
    "frequency_penalty": 0.5,
    "presence_penalty": -0.5,
    "seed": 7,
    "logit_bias": {"3": 5.0},
    "min_tokens": 2,
}


@pytest.mark.parametrize(
    ("schema", "prompt"),
    [(CompletionRequest, {"prompt": PROMPT}), (ChatCompletionRequest, {"messages": STORY})],
)
def test_the_request_fields_reach_the_sampler_by_name(schema, prompt):
    """No field is copied by hand: a knob added to `SamplingParams` must be a request
    field too, and this test names every one."""
    assert set(KNOBS) == set(SAMPLER_FIELDS)
    plain = parse(json.dumps({"model": "tiny", **prompt}).encode(), schema)
    assert plain.sampling_params(vocab_size=100) == SamplingParams()
    tuned = parse(json.dumps({"model": "tiny", **prompt, **KNOBS}).encode(), schema)
    expected = SamplingParams(**{**KNOBS, "logit_bias": {3: 5.0}})
    assert tuned.sampling_params(vocab_size=100) == expected
