"""The ASGI app: routes and methods it lacks, the API key and CORS, each an OpenAI error."""

from __future__ import annotations

import httpx
import openai
import pytest
from openai import OpenAI

from conftest import JSON, error_of, post
from llmserve_ref.serving.app import Access
from llmserve_ref.serving.launcher import serve_in_thread


@pytest.mark.parametrize(
    ("method", "path", "status", "code"),
    [
        ("GET", "/v2/nothing", 404, "unknown_url"),
        ("DELETE", "/v1/models", 405, "method_not_allowed"),
        ("GET", "/v1/completions", 405, "method_not_allowed"),
    ],
)
def test_unknown_routes_and_methods_get_openai_errors(server, method, path, status, code):
    response = httpx.request(method, f"{server.url}{path}")
    assert response.status_code == status
    assert response.json()["error"]["code"] == code


def test_the_api_key_guards_v1_only_and_cors_is_off_unless_asked():
    access = Access(api_key="s3cret", allowed_origins=("https://app.example",))
    with serve_in_thread("tiny", access=access) as running:
        body = {"model": "tiny", "prompt": "Once", "max_tokens": 2}
        for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": "s3cret"}):
            response = post(running, body, headers={**JSON, **headers})
            assert error_of(response, 401)["code"] == "invalid_api_key"
        with pytest.raises(openai.AuthenticationError):
            OpenAI(base_url=running.base_url, api_key="wrong", max_retries=0).models.list()
        client = OpenAI(base_url=running.base_url, api_key="s3cret", max_retries=0)
        assert client.completions.create(**body).usage.completion_tokens == 2
        assert httpx.get(f"{running.url}/health").status_code == 200  # not under /v1
        preflight = httpx.options(
            f"{running.base_url}/completions",
            headers={
                "origin": "https://app.example",
                "access-control-request-method": "POST",
                "access-control-request-headers": "authorization, content-type",
            },
        )
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == "https://app.example"
        other = httpx.options(
            f"{running.base_url}/completions",
            headers={"origin": "https://evil.example", "access-control-request-method": "POST"},
        )
        assert "access-control-allow-origin" not in other.headers


def test_without_allowed_origins_no_page_may_call_the_server(server):
    preflight = httpx.options(
        f"{server.base_url}/completions",
        headers={"origin": "https://evil.example", "access-control-request-method": "POST"},
    )
    assert "access-control-allow-origin" not in preflight.headers
