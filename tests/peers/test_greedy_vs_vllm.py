"""vLLM's greedy output is ours, token for token, in float32.

vLLM returns its token ids (``"return_token_ids": true``); they must equal what
`llmserve_ref.model.generate.generate` picks in this process from the same prompt ids,
which start with BOS on both sides. Our server returns text only, so its text must
equal vLLM's. In bfloat16 the two would differ where the top two logits nearly tie,
which is why both servers run in float32.
"""

from __future__ import annotations

import httpx
import pytest

from llmserve_ref.model.chat_template import render
from llmserve_ref.model.tokenizer import Tokenizer
from llmserve_ref.model.weights import TARGET_DIR

from . import servers

if not servers.HAVE_VLLM:
    pytest.skip(servers.NEEDS_VLLM, allow_module_level=True)

MAX_TOKENS = 32
tokenizer = Tokenizer.from_file(TARGET_DIR)


def post(server: servers.Server, path: str, body: dict) -> dict:
    response = httpx.post(f"{server.url}{path}", json=body, timeout=120)
    assert response.status_code == 200, f"{server.name} {path}: {response.text[:500]}"
    return response.json()


@pytest.mark.parametrize("prompt", servers.PROMPTS)
def test_completion_tokens_and_text(prompt, greedy, vllm, ours):
    prompt_ids = tokenizer.encode(prompt, add_bos=True)
    expected = greedy(prompt_ids, MAX_TOKENS)
    body = {
        "model": servers.MODEL_NAME,
        "prompt": prompt,
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
    }

    theirs = post(vllm, "/v1/completions", {**body, "return_token_ids": True})["choices"][0]
    assert theirs["prompt_token_ids"] == prompt_ids  # vLLM adds BOS, as we do
    assert theirs["token_ids"] == expected
    mine = post(ours, "/v1/completions", body)["choices"][0]
    assert mine["text"] == theirs["text"]
    assert mine["finish_reason"] == theirs["finish_reason"]
    print(f"\n{prompt!r} -> {theirs['text']!r} ({len(expected)} tokens, same on both)")


def test_chat_tokens_and_text(greedy, vllm, ours):
    messages = [{"role": "user", "content": "Tell me a story."}]
    prompt_ids = tokenizer.encode(render(messages))  # the template starts with <|bos|>
    expected = greedy(prompt_ids, MAX_TOKENS)
    body = {
        "model": servers.MODEL_NAME,
        "messages": messages,
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
    }

    theirs = post(vllm, "/v1/chat/completions", {**body, "return_token_ids": True})
    assert theirs["prompt_token_ids"] == prompt_ids  # the same chat template
    assert theirs["choices"][0]["token_ids"] == expected
    mine = post(ours, "/v1/chat/completions", body)
    assert mine["choices"][0]["message"]["content"] == theirs["choices"][0]["message"]["content"]
    assert mine["choices"][0]["finish_reason"] == theirs["choices"][0]["finish_reason"]
