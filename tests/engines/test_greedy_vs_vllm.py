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
import torch

from llmserve_ref.model.chat_template import render
from llmserve_ref.model.generate import generate
from llmserve_ref.model.sampling import SamplingParams
from llmserve_ref.model.weights import load_target

from . import servers

if not servers.HAVE_VLLM:
    pytest.skip(servers.NEEDS_VLLM, allow_module_level=True)

MAX_TOKENS = 32
PROMPTS = [
    "Once upon a time,",
    "The little fox",
    "Mia had a red ball.",
    "<|user|>Tell me a story.<|assistant|>",  # the chat template, written out by hand
    # Longer than one 32-token block: the prompt's KV spans two blocks on both servers.
    "Sam and Lily went to the park. They saw a big dog with a red ball. Sam wanted to "
    "play with the dog, but Lily was scared. The dog ran to them and",
]


@pytest.fixture(scope="module")
def reference():
    """Our model in this process, on the CPU, in float32, and its tokenizer."""
    model, tokenizer = load_target("cpu")
    assert next(model.parameters()).dtype == torch.float32
    return model, tokenizer


def greedy(reference, prompt_ids: list[int]) -> list[int]:
    model, tokenizer = reference
    return list(
        generate(
            model,
            prompt_ids,
            SamplingParams(temperature=0),
            max_new_tokens=MAX_TOKENS,
            stop_token_ids={tokenizer.eos_id},
        )
    )


def post(server: servers.Server, path: str, body: dict) -> dict:
    response = httpx.post(f"{server.url}{path}", json=body, timeout=120)
    assert response.status_code == 200, f"{server.name} {path}: {response.text[:500]}"
    return response.json()


@pytest.mark.parametrize("prompt", PROMPTS)
def test_completion_tokens_and_text(prompt, reference, vllm, ours):
    _, tokenizer = reference
    prompt_ids = tokenizer.encode(prompt, add_bos=True)
    expected = greedy(reference, prompt_ids)
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


def test_chat_tokens_and_text(reference, vllm, ours):
    _, tokenizer = reference
    messages = [{"role": "user", "content": "Tell me a story."}]
    prompt_ids = tokenizer.encode(render(messages))  # the template starts with <|bos|>
    expected = greedy(reference, prompt_ids)
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
