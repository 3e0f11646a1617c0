"""Parsing: each problem is one OpenAI error naming the field; unsupported fields are refused."""

from __future__ import annotations

import pytest

from llmserve_ref.serving.chat_requests import ChatCompletionRequest
from llmserve_ref.serving.errors import OpenAIError
from llmserve_ref.serving.openai_parsing import UNSUPPORTED, parse
from llmserve_ref.serving.openai_requests import CompletionRequest

CHAT = b'{"model": "tiny", "messages": [{"role": "user", "content": "Hi"}]'


NO = "unsupported_parameter"  # a field this server does not implement, refused by name
PROMPT = b'{"model": "tiny", "prompt": "x"'
ROBOT = b'{"model": "tiny", "messages": [{"role": "robot", "content": "x"}]}'
PROBLEMS = [
    (b"{not json", CompletionRequest, None, "invalid_json"),
    (b"[1, 2]", CompletionRequest, None, "invalid_type"),
    (b'{"prompt": "Once"}', CompletionRequest, "model", "missing_parameter"),
    (PROMPT + b', "temperature": "1"}', CompletionRequest, "temperature", "invalid_type"),
    (PROMPT + b', "n": 0}', CompletionRequest, "n", "invalid_value"),
    (ROBOT, ChatCompletionRequest, "messages[0].role", "invalid_value"),
    (CHAT + b', "tools": [{"type": "function"}]}', ChatCompletionRequest, "tools", NO),
    (
        CHAT + b', "response_format": {"type": "json_object"}}',
        ChatCompletionRequest,
        "response_format",
        NO,
    ),
    (CHAT + b', "n": 2, "best_of": 3}', ChatCompletionRequest, "best_of", NO),
]


@pytest.mark.parametrize(("body", "schema", "param", "code"), PROBLEMS)
def test_each_problem_is_an_error_naming_its_field(body, schema, param, code):
    with pytest.raises(OpenAIError) as raised:
        parse(body, schema)
    assert (raised.value.status, raised.value.param, raised.value.code) == (400, param, code)


def test_harmless_unknown_fields_pass_and_tool_choice_none_is_no_tools():
    request = parse(
        CHAT + b', "user": "u1", "metadata": {"a": "b"}, "tool_choice": "none"}',
        ChatCompletionRequest,
    )
    assert request.messages[0].text() == "Hi"
    assert "tools" in UNSUPPORTED and "user" not in UNSUPPORTED
