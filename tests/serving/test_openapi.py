"""The server's OpenAPI document: valid OpenAPI 3.1 by an outside validator
(openapi-spec-validator), the routes the server really has, and the bodies it really sends."""

from __future__ import annotations

import httpx
import jsonschema
import pytest
from openapi_checks import check_body, check_events, documented_response
from openapi_spec_validator import OpenAPIV31SpecValidator, validate

from llmserve_ref.serving.app import ENDPOINTS, Access, create_app
from llmserve_ref.serving.launcher import serve_in_thread
from llmserve_ref.serving.openapi import openapi_document
from llmserve_ref.serving.streams import sse


@pytest.fixture(scope="module")
def document(server) -> dict:
    return httpx.get(f"{server.url}/openapi.json").json()


def test_the_served_document_is_valid_openapi_3_1(document):
    validate(document, cls=OpenAPIV31SpecValidator)
    assert document == openapi_document("tiny")
    broken = {**document, "paths": {"/health": {"get": {"responses": {"200": {}}}}}}
    with pytest.raises(Exception, match="description"):  # the validator is not vacuous
        validate(broken, cls=OpenAPIV31SpecValidator)


def test_it_describes_exactly_the_routes_and_methods_the_server_has(server, document):
    app = create_app(server.engine, "tiny")
    routes = {route.path: {m.lower() for m in route.methods} - {"head"} for route in app.routes}
    assert routes == {path: set(item) for path, item in document["paths"].items()}
    assert set(routes) == set(ENDPOINTS)


COMPLETION = {"model": "tiny", "prompt": "Once", "max_tokens": 4, "seed": 0}
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "n": 2}
STREAM = {"stream": True, "stream_options": {"include_usage": True}}
JSON = {"content-type": "application/json"}


@pytest.mark.parametrize(
    "method, path, request_args, status",
    [
        ("GET", "/v1/models", {}, 200),
        ("GET", "/health", {}, 200),
        ("GET", "/metrics", {}, 200),
        ("GET", "/openapi.json", {}, 200),
        ("POST", "/v1/completions", {"json": COMPLETION}, 200),
        ("POST", "/v1/completions", {"json": {**COMPLETION, "stream": True}}, 200),
        ("POST", "/v1/completions", {"json": {**COMPLETION, **STREAM, "logprobs": 1}}, 200),
        ("POST", "/v1/chat/completions", {"json": CHAT}, 200),
        ("POST", "/v1/chat/completions", {"json": {**CHAT, **STREAM, "logprobs": True}}, 200),
        ("POST", "/v1/completions", {"json": {**COMPLETION, "logprobs": 2}}, 200),
        ("POST", "/v1/completions", {"json": {**COMPLETION, "temperature": "hot"}}, 400),
        ("POST", "/v1/chat/completions", {"content": b"{not json", "headers": JSON}, 400),
        ("POST", "/v1/completions", {"json": {**COMPLETION, "max_tokens": 10**6}}, 400),
        ("POST", "/v1/completions", {"json": {**COMPLETION, "model": "gpt-4"}}, 404),
        ("POST", "/v1/completions", {"json": {**COMPLETION, "prompt": "x" * 2**21}}, 413),
        ("POST", "/v1/completions", {"content": b"Once"}, 415),
        ("GET", "/v1/chat/completions", {}, 405),
        ("GET", "/v1/engines", {}, 404),
    ],
)
def test_what_the_server_answers_is_what_the_document_says(
    server, document, method, path, request_args, status
):
    response = httpx.request(method, f"{server.url}{path}", timeout=60, **request_args)
    assert response.status_code == status, response.text
    content = documented_response(document, method, path, status)["content"]
    media_type = response.headers["content-type"].split(";")[0]
    assert media_type in content, f"{media_type} not documented for {method} {path} {status}"
    if media_type == "application/json":
        check_body(document, content[media_type]["schema"], response.json())
    elif media_type == "text/plain":
        check_body(document, content[media_type]["schema"], response.text)
    else:
        check_events(document, content[media_type], response.text)
    check_headers(documented_response(document, method, path, status), response)


def check_headers(documented: dict, response: httpx.Response) -> None:
    """The headers the document says an answer must carry are there."""
    for name, header in documented.get("headers", {}).items():
        assert not header.get("required") or name in response.headers, (name, response.headers)


def test_a_missing_api_key_gets_401_as_documented(server, document):
    """From a second server on the same engine, started with an API key."""
    with serve_in_thread(engine=server.engine, access=Access(api_key="sesame")) as guarded:
        response = httpx.get(f"{guarded.url}/v1/models")
    assert response.status_code == 401, response.text
    documented = documented_response(document, "GET", "/v1/models", 401)
    check_body(document, documented["content"]["application/json"]["schema"], response.json())
    check_headers(documented, response)


def test_the_schemas_catch_what_a_server_must_not_send(document):
    """The checks above can fail: an error without `param`, an unknown finish reason, a
    stream that does not end with [DONE]."""
    error = {"$ref": "#/components/schemas/Error"}
    check_body(
        document, error, {"error": {"message": "m", "type": "t", "param": None, "code": None}}
    )
    with pytest.raises(jsonschema.ValidationError, match="'param' is a required property"):
        check_body(document, error, {"error": {"message": "m", "type": "t"}})
    stream = documented_response(document, "POST", "/v1/completions", 200)["content"]
    stream = stream["text/event-stream"]
    chunk = {"id": "c", "object": "text_completion", "created": 0, "model": "tiny"}
    choice = {"index": 0, "text": "", "logprobs": None, "finish_reason": "length"}
    check_events(document, stream, sse({**chunk, "choices": [choice]}) + sse("[DONE]"))
    with pytest.raises(jsonschema.ValidationError, match="'done' is not valid"):
        bad = {**choice, "finish_reason": "done"}
        check_events(document, stream, sse({**chunk, "choices": [bad]}) + sse("[DONE]"))
    with pytest.raises(AssertionError):
        check_events(document, stream, sse({**chunk, "choices": [choice]}))
