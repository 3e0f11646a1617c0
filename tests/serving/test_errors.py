"""OpenAI's error body, exactly the four fields its clients read."""

from __future__ import annotations

import openai
import pytest

from llmserve_ref.serving.errors import OpenAIError


def test_the_body_has_openais_shape_and_defaults():
    error = OpenAIError("Bad.", param="n", code="invalid_value")
    assert error.status == 400 and str(error) == "Bad."
    assert error.body() == {
        "error": {
            "message": "Bad.",
            "type": "invalid_request_error",
            "param": "n",
            "code": "invalid_value",
        }
    }
    overloaded = OpenAIError("Later.", 429, code="server_overloaded", type="server_error")
    assert (
        overloaded.body()["error"]["type"] == "server_error"
        and overloaded.body()["error"]["param"] is None
    )


@pytest.mark.parametrize(
    ("status", "exception"),
    [(400, openai.BadRequestError), (404, openai.NotFoundError), (429, openai.RateLimitError)],
)
def test_the_official_client_reads_the_body_as_its_own(status, exception):
    import httpx

    body = OpenAIError("Nope.", status, param="model", code="model_not_found").body()
    request = httpx.Request("POST", "http://127.0.0.1/v1/completions")
    response = httpx.Response(status, json=body, request=request)
    client = openai.OpenAI(base_url="http://127.0.0.1/v1", api_key="none")
    error = client._make_status_error_from_response(response)
    assert isinstance(error, exception)
    assert (error.code, error.param, error.body["message"]) == ("model_not_found", "model", "Nope.")
