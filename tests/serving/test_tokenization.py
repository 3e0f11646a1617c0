"""/tokenize, /detokenize and /version: vLLM's routes, answering as the generating routes count."""

from __future__ import annotations

import httpx
import pytest
from openapi_checks import check_body, documented_response

import llmserve_ref
from llmserve_ref.serving.app import Access
from llmserve_ref.serving.launcher import serve_in_thread

STORY = [{"role": "user", "content": "Tell me a story about Zoé."}]


@pytest.fixture(scope="module")
def document(server) -> dict:
    return httpx.get(f"{server.url}/openapi.json").json()


def post(server, path: str, body: dict) -> httpx.Response:
    return httpx.post(f"{server.url}{path}", json=body, timeout=30)


def test_a_prompt_counts_as_the_completion_counts_it_and_decodes_back(server, client, document):
    prompt = "Once upon a time, <|user|> said the fox."
    answer = post(server, "/tokenize", {"prompt": prompt, "return_token_strs": True})
    assert answer.status_code == 200
    check_body(document, documented_response(document, "POST", "/tokenize", 200)["content"]
               ["application/json"]["schema"], answer.json())  # fmt: skip
    tokens = answer.json()
    usage = client.completions.create(model="tiny", prompt=prompt, max_tokens=1).usage
    assert tokens["count"] == len(tokens["tokens"]) == usage.prompt_tokens
    assert tokens["max_model_len"] == server.engine.max_model_len
    assert tokens["token_strs"][:2] == ["<|bos|>", "Once"]
    decoded = post(server, "/detokenize", {"tokens": tokens["tokens"][1:]}).json()
    assert decoded == {"prompt": prompt}
    bare = post(server, "/tokenize", {"prompt": prompt, "add_special_tokens": False}).json()
    assert bare["tokens"] == tokens["tokens"][1:] and bare["token_strs"] is None


def test_a_chat_counts_as_the_chat_endpoint_counts_it(server, client):
    usage = client.chat.completions.create(model="tiny", messages=STORY, max_tokens=1).usage
    chat = post(server, "/tokenize", {"model": "tiny", "messages": STORY}).json()
    assert chat["count"] == usage.prompt_tokens
    closed = post(server, "/tokenize", {"messages": STORY, "add_generation_prompt": False})
    assert closed.json()["tokens"] == chat["tokens"][:-1]  # without the open <|assistant|>
    partial = [*STORY, {"role": "assistant", "content": "Once upon"}]
    body = {"messages": partial, "add_generation_prompt": False, "continue_final_message": True}
    opened = post(server, "/tokenize", body).json()
    usage = client.chat.completions.create(model="tiny", messages=partial, max_tokens=1,
                                           extra_body=body).usage  # fmt: skip
    assert opened["count"] == usage.prompt_tokens
    assert opened["tokens"][-1] != server.engine.tokenizer.eos_id  # left open to continue


@pytest.mark.parametrize(
    ("path", "body", "status", "param"),
    [
        ("/tokenize", {"prompt": "x", "model": "gpt-4"}, 404, "model"),
        ("/tokenize", {"prompt": 3}, 400, "prompt"),
        ("/tokenize", {"messages": STORY, "continue_final_message": True}, 400,
         "continue_final_message"),  # and add_generation_prompt, by default
        ("/tokenize", {"messages": [{"role": "tool", "content": "42"}]}, 400, "messages[0].role"),
        ("/detokenize", {"tokens": [5, 99999]}, 400, "tokens"),
        ("/detokenize", {}, 400, "tokens"),
    ],
)  # fmt: skip
def test_bad_input_is_an_openai_error_naming_the_field(server, document, path, body, status, param):
    answer = post(server, path, body)
    assert answer.status_code == status
    assert answer.json()["error"]["param"] == param
    check_body(document, {"$ref": "#/components/schemas/Error"}, answer.json())


def test_version_and_no_key_outside_v1(server):
    assert httpx.get(f"{server.url}/version").json() == {"version": llmserve_ref.__version__}
    with serve_in_thread("tiny", access=Access(api_key="k")) as keyed:
        assert httpx.post(f"{keyed.url}/tokenize", json={"prompt": "x"}).status_code == 200
        assert httpx.get(f"{keyed.url}/v1/models").status_code == 401
