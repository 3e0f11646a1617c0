"""llama.cpp runs our GGUF export as we run the model: the same greedy tokens.

`llmserve_ref.model.gguf_export` writes the file; llama.cpp's own server, `llama-server`
(built by `nox -s engines` from the llama.cpp source that llama-cpp-python's sdist vendors),
serves it. On /v1/completions and on /v1/chat/completions its greedy
reply must be the text of the tokens our model picks in this process from our prompt ids,
as many tokens, and so must our server's. Its prompt_tokens must be our prompt's length:
our prompts start with exactly one BOS on both endpoints, so a missing or doubled BOS
(the GGUF's add_bos_token against the chat template's own <|bos|>) shows there. The
TypeScript client of the run-a-model-locally page streams from it too.
"""

from __future__ import annotations

import os
import re
import subprocess

import httpx
import pytest

from llmserve_ref.model.chat_template import render_ids
from llmserve_ref.model.tokenizer import Tokenizer
from llmserve_ref.model.weights import TARGET_DIR

from . import servers

if not servers.HAVE_LLAMA_CPP:
    pytest.skip(servers.NEEDS_LLAMA_CPP, allow_module_level=True)

MAX_TOKENS = 32
CHATS = [
    [{"role": "user", "content": "Tell me a story."}],
    [{"role": "user", "content": "Tell me a story about a fox named Mia."}],
    [
        {"role": "system", "content": "The story is about a cat."},
        {"role": "user", "content": "Tell me a story."},
    ],
    [
        {"role": "user", "content": "Tell me a story."},
        {"role": "assistant", "content": "Once upon a time, there was a dog."},
        {"role": "user", "content": "Another one."},
    ],
]
GREEDY = {"model": servers.MODEL_NAME, "temperature": 0}
TS_CLIENT = servers.ROOT / "clients" / "ts"
tokenizer = Tokenizer.from_file(TARGET_DIR)


def reply(ids: list[int]) -> tuple[list[int], str]:
    """The tokens whose text a server sends for a greedy continuation `ids` (not <|eos|>,
    which llama-server counts in completion_tokens all the same), and its finish_reason."""
    if ids and ids[-1] == tokenizer.eos_id:
        return ids[:-1], "stop"
    return ids, "length"


def post(server: servers.Server, path: str, body: dict) -> dict:
    response = httpx.post(f"{server.url}{path}", json=body, timeout=120)
    assert response.status_code == 200, f"{server.name} {path}: {response.text[:500]}"
    return response.json()


@pytest.mark.parametrize("prompt", servers.PROMPTS)
def test_completion_matches_ours(prompt, greedy, llama_cpp, ours):
    prompt_ids = tokenizer.encode(prompt, add_bos=True)  # special tokens read, as vLLM does
    generated = greedy(prompt_ids, MAX_TOKENS)
    expected, finish_reason = reply(generated)
    body = {**GREEDY, "prompt": prompt, "max_tokens": MAX_TOKENS}

    theirs = post(llama_cpp, "/v1/completions", body)
    assert theirs["usage"]["prompt_tokens"] == len(prompt_ids)  # one BOS, the same tokens
    assert theirs["usage"]["completion_tokens"] == len(generated)
    text = theirs["choices"][0]["text"]
    assert text == tokenizer.decode(expected)
    assert theirs["choices"][0]["finish_reason"] == finish_reason
    mine = post(ours, "/v1/completions", body)
    assert mine["usage"]["completion_tokens"] == len(generated)  # <|eos|> counted by both
    assert mine["choices"][0]["text"] == text
    assert mine["choices"][0]["finish_reason"] == finish_reason
    print(f"\n{prompt!r} -> {text!r} ({len(expected)} tokens, {finish_reason})")


@pytest.mark.parametrize("messages", CHATS, ids=range(len(CHATS)))
def test_chat_matches_ours(messages, greedy, llama_cpp, ours):
    prompt_ids = render_ids(messages, tokenizer)  # starts with the template's one <|bos|>
    generated = greedy(prompt_ids, MAX_TOKENS)
    expected, finish_reason = reply(generated)
    body = {**GREEDY, "messages": messages, "max_tokens": MAX_TOKENS}

    theirs = post(llama_cpp, "/v1/chat/completions", body)
    assert theirs["usage"]["prompt_tokens"] == len(prompt_ids)
    assert theirs["usage"]["completion_tokens"] == len(generated)
    text = theirs["choices"][0]["message"]["content"]
    assert text == tokenizer.decode(expected)
    assert theirs["choices"][0]["finish_reason"] == finish_reason
    mine = post(ours, "/v1/chat/completions", body)
    assert mine["usage"]["prompt_tokens"] == len(prompt_ids)
    assert mine["choices"][0]["message"]["content"] == text
    assert mine["choices"][0]["finish_reason"] == finish_reason
    print(f"\n{messages[0]['content']!r} -> {text!r} ({len(expected)} tokens, {finish_reason})")


def test_its_defaults_do_not_penalize_repeats(llama_cpp):
    """Greedy is argmax only where no repeat penalty applies: llama-server's default is 1.0
    (off), which the run-a-model-locally page's request relies on. Its slots and context per
    slot are the ones the running-a-serving-engine page says it has."""
    props = httpx.get(f"{llama_cpp.url}/props", timeout=30).json()
    params = props["default_generation_settings"]["params"]
    assert params["repeat_penalty"] == 1.0, params
    assert props["total_slots"] == servers.LLAMA_CPP_SLOTS
    assert props["default_generation_settings"]["n_ctx"] == servers.MAX_MODEL_LEN  # per slot


def test_the_typescript_client_streams_from_it(llama_cpp):
    env = {**os.environ, "OPENAI_BASE_URL": llama_cpp.base_url, "MODEL": servers.MODEL_NAME}
    done = subprocess.run(
        ["npx", "--no-install", "tsx", "chat.ts", "Tell me a story about a fox."],
        cwd=TS_CLIENT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"{done.stderr}\n(run `npm ci --prefix clients/ts` first)"
    print(f"\n{done.stdout}")
    story = done.stdout.splitlines()[0]
    assert re.search(r"[A-Za-z]{3,}", story), done.stdout  # words arrived as a stream
    assert re.search(r"\[client\] first token after \d+ ms", done.stdout)
