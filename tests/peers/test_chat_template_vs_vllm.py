"""vLLM reads our chat template from tokenizer_config.json and renders what we render.

A system message reaches the tiny model as text in front of the first user message
(`llmserve_ref.model.chat_template`): vLLM, running the Jinja template, must give the same
prompt token ids, and so the same prompt_tokens and the same greedy reply as ours. A
conversation the template refuses is a 400 on both servers.
"""

from __future__ import annotations

import httpx
import pytest

from llmserve_ref.model.chat_template import render_ids
from llmserve_ref.model.tokenizer import Tokenizer
from llmserve_ref.model.weights import TARGET_DIR

from . import servers

if not servers.HAVE_VLLM:
    pytest.skip(servers.NEEDS_VLLM, allow_module_level=True)

MAX_TOKENS = 32
SYSTEM_CHATS = [
    [
        {"role": "system", "content": "The story is about a cat."},
        {"role": "user", "content": "Tell me a story."},
    ],
    [
        {"role": "developer", "content": "Mia is a fox."},
        {"role": "system", "content": "Keep it short."},
        {"role": "user", "content": "Tell me a story about Mia."},
        {"role": "assistant", "content": "Once upon a time, Mia ran."},
        {"role": "user", "content": "Another one."},
    ],
]
tokenizer = Tokenizer.from_file(TARGET_DIR)


def chat(server: servers.Server, body: dict) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=120)


@pytest.mark.parametrize("messages", SYSTEM_CHATS, ids=["system", "developer-and-system"])
def test_a_system_message_is_rendered_alike(messages, greedy, vllm, ours):
    prompt_ids = render_ids(messages, tokenizer)
    expected = greedy(prompt_ids, MAX_TOKENS)
    body = {
        "model": servers.MODEL_NAME,
        "messages": messages,
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
    }

    theirs = chat(vllm, {**body, "return_token_ids": True})
    assert theirs.status_code == 200, theirs.text[:500]
    theirs = theirs.json()
    assert theirs["prompt_token_ids"] == prompt_ids
    assert theirs["usage"]["prompt_tokens"] == len(prompt_ids)
    assert theirs["choices"][0]["token_ids"] == expected
    mine = chat(ours, body)
    assert mine.status_code == 200, mine.text[:500]
    mine = mine.json()
    assert mine["usage"]["prompt_tokens"] == theirs["usage"]["prompt_tokens"]
    assert mine["choices"][0]["message"]["content"] == theirs["choices"][0]["message"]["content"]
    print(f"\n{messages[0]['content']!r} -> {mine['choices'][0]['message']['content']!r}")


def test_a_final_message_is_continued_alike(greedy, vllm, ours):
    """vLLM's ``continue_final_message``: the last (assistant) message left open, the reply
    its continuation."""
    messages = [*SYSTEM_CHATS[0][:2], {"role": "assistant", "content": "Once upon a"}]
    prompt_ids = render_ids(messages, tokenizer, False, continue_final_message=True)
    body = {"model": servers.MODEL_NAME, "messages": messages, "max_tokens": MAX_TOKENS,
            "temperature": 0, "add_generation_prompt": False,
            "continue_final_message": True}  # fmt: skip
    theirs = chat(vllm, {**body, "return_token_ids": True})
    assert theirs.status_code == 200, theirs.text[:500]
    theirs = theirs.json()
    assert theirs["prompt_token_ids"] == prompt_ids
    assert theirs["choices"][0]["token_ids"] == greedy(prompt_ids, MAX_TOKENS)
    mine = chat(ours, body)
    assert mine.status_code == 200, mine.text[:500]
    mine = mine.json()
    assert mine["usage"]["prompt_tokens"] == len(prompt_ids)
    assert mine["choices"][0]["message"]["content"] == theirs["choices"][0]["message"]["content"]


def test_a_system_message_after_the_first_turn_is_refused_by_both(vllm, ours):
    messages = [
        {"role": "user", "content": "Tell me a story."},
        {"role": "system", "content": "The story is about a cat."},
    ]
    body = {"model": servers.MODEL_NAME, "messages": messages, "max_tokens": 4}
    for server in (vllm, ours):
        response = chat(server, body)
        assert response.status_code == 400, f"{server.name}: {response.text[:500]}"
        assert "messages[1] is a system message" in response.json()["error"]["message"]
