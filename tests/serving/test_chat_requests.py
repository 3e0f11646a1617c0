"""The chat request: messages through the template, and vLLM's two switches for its end."""

from __future__ import annotations

import httpx
import pytest

from llmserve_ref.model.chat_template import render_ids
from llmserve_ref.serving.chat_requests import ChatCompletionRequest
from llmserve_ref.serving.errors import OpenAIError
from llmserve_ref.serving.openai_parsing import parse

STORY = [{"role": "user", "content": "Tell me a story about a fox."}]
PARTIAL = [*STORY, {"role": "assistant", "content": "Once upon a time, the fox"}]


def test_a_reply_continues_the_final_message_when_asked(server, client):
    extra = {"add_generation_prompt": False, "continue_final_message": True}
    reply = client.chat.completions.create(model="tiny", messages=PARTIAL, max_tokens=8,
                                           temperature=0, extra_body=extra)  # fmt: skip
    tokenizer = server.engine.tokenizer
    prompt = render_ids(PARTIAL, tokenizer, False, continue_final_message=True)
    assert reply.usage.prompt_tokens == len(prompt)
    assert prompt[-1] != tokenizer.eos_id  # the answer is left open ...
    fresh = client.chat.completions.create(model="tiny", messages=PARTIAL, max_tokens=8,
                                           temperature=0)  # fmt: skip
    assert fresh.usage.prompt_tokens == len(prompt) + 2  # ... not closed, a new turn opened
    assert reply.choices[0].message.content != fresh.choices[0].message.content


def test_continuing_and_opening_a_turn_at_once_is_refused_naming_the_field(server):
    body = {"model": "tiny", "messages": PARTIAL, "continue_final_message": True}
    answer = httpx.post(f"{server.base_url}/chat/completions", json=body)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert (
        error["param"] == "continue_final_message" and "add_generation_prompt" in error["message"]
    )


def test_text_parts_are_one_message(server):
    parts = [{"type": "text", "text": "Tell me a story "}, {"type": "text", "text": "about a fox."}]
    request = parse(
        httpx.Request("POST", "/", json={"model": "tiny", "messages": [
            {"role": "user", "content": parts}]}).content,
        ChatCompletionRequest,
    )  # fmt: skip
    tokenizer = server.engine.tokenizer
    assert request.encode_prompt(tokenizer) == render_ids(STORY, tokenizer)
    assert request.prompt_chars() == len(STORY[0]["content"])


def test_a_role_the_template_cannot_place_is_an_error_naming_the_messages(server):
    body = b'{"model": "tiny", "messages": [{"role": "assistant", "content": "x"}, ' \
           b'{"role": "system", "content": "late"}]}'  # fmt: skip
    request = parse(body, ChatCompletionRequest)
    with pytest.raises(OpenAIError) as raised:
        request.encode_prompt(server.engine.tokenizer)
    assert raised.value.param == "messages" and "messages[1]" in str(raised.value)
