"""From a request's body to a checked request, or an OpenAI error naming the field.

`read_body` reads the body within the server's `Limits` (JSON only, not too big, in
time), and `parse` validates the JSON against the endpoint's schema (``CompletionRequest`` or
``ChatCompletionRequest``, pydantic in strict mode) and turns the first problem into an
`OpenAIError` that names the field as OpenAI does (``messages[0].role``), with what to
send instead. A field the server does not implement and that would change the output
(``tools``, ``response_format`` other than text, ...) is refused by name rather than
ignored: ignoring it would answer 200 with an output the client did not ask for.

>>> from llmserve_ref.serving.openai_requests import CompletionRequest
>>> request = parse(b'{"model": "tiny", "prompt": "Once", "temperature": 0.5}', CompletionRequest)
>>> request.temperature, request.n, request.stream
(0.5, 1, False)
>>> parse(b'{"model": "tiny", "prompt": "Once", "n": "2"}', CompletionRequest)
Traceback (most recent call last):
...
llmserve_ref.serving.errors.OpenAIError: Invalid type for 'n': Input should be ...
"""

from __future__ import annotations

import asyncio
from typing import TypeVar

from pydantic import ValidationError
from starlette.requests import ClientDisconnect, Request

from llmserve_ref.serving.errors import OpenAIError
from llmserve_ref.serving.limits import Limits, check_json_content_type
from llmserve_ref.serving.openai_requests import OpenAIRequest, StrictSchema

Schema = TypeVar("Schema", bound=StrictSchema)

# Fields of OpenAI's API (and vLLM's) that change the output, which this server does not
# implement: a request that sets one gets a 400 naming it (`check_supported`).
UNSUPPORTED = (
    "tools",
    "tool_choice",
    "functions",
    "function_call",
    "suffix",
    "audio",
    "modalities",
    "prediction",
    "web_search_options",
    "structured_outputs",
    "guided_json",
    "guided_regex",
    "guided_choice",
    "guided_grammar",
)


def _unsupported(name: str, what: str = "it is not") -> OpenAIError:
    return OpenAIError(
        f"'{name}' is not supported by this server ({what} implemented), and ignoring it "
        "would change the output. Remove it from the request.",
        param=name,
        code="unsupported_parameter",
    )


# --8<-- [start:read_body]
async def read_body(request: Request, limits: Limits) -> bytes:
    """The JSON body: refused unless it is JSON (415), not too big (413), and sent in
    time (408). A body announced as too big is refused before a byte of it is read;
    a client that leaves halfway gets nginx's 499, which nobody reads but /metrics."""
    check_json_content_type(request.headers.get("content-type"))
    limits.check_content_length(request.headers.get("content-length"))
    try:
        return await asyncio.wait_for(limits.read_capped(request.stream()), limits.body_timeout_s)
    except asyncio.TimeoutError:
        raise OpenAIError(
            f"The request body did not arrive within {limits.body_timeout_s} s.",
            408,
            code="request_timeout",
        ) from None
    except ClientDisconnect:
        raise OpenAIError(
            "The client disconnected before sending its whole body.",
            499,
            code="client_disconnected",
        ) from None


# --8<-- [end:read_body]


def parse(body: bytes, schema: type[Schema]) -> Schema:
    """The request in `body`, or an `OpenAIError` naming the first problem."""
    try:
        request = schema.model_validate_json(body)
    except ValidationError as error:
        problem = error.errors()[0]
        param = _param(problem["loc"])
        if problem["type"] == "json_invalid":
            raise OpenAIError(
                "We could not parse the JSON body of your request: "
                f"{problem['ctx']['error']}. Send a valid JSON object.",
                code="invalid_json",
            ) from None
        if param is None:
            raise OpenAIError(
                "The request body must be a JSON object.", code="invalid_type"
            ) from None
        if problem["type"] == "missing":
            raise OpenAIError(
                f"Missing required parameter: '{param}'.", param=param, code="missing_parameter"
            ) from None
        kind = "type" if problem["type"].endswith("_type") else "value"
        raise OpenAIError(
            f"Invalid {kind} for '{param}': {problem['msg']}.", param=param, code=f"invalid_{kind}"
        ) from None
    if isinstance(request, OpenAIRequest):  # what generates: refuse what it would ignore
        check_supported(request)
    return request


def _param(loc: tuple[str | int, ...]) -> str | None:
    """``messages[0].role`` from pydantic's location, without its union tags (``str``...)."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part.isidentifier() and part.islower() and part not in ("str", "int", "float", "bool"):
            path += f".{part}" if path else part
    return path or None


def check_supported(request: OpenAIRequest) -> None:
    """Refuse a field that would change the output and that this server does not
    implement: ignoring it, as an unknown field is ignored, would answer 200 with an
    output the client did not ask for. Harmless fields (``user``, ``metadata``) pass."""
    extra = request.model_extra or {}
    for name in UNSUPPORTED:
        if extra.get(name) and extra[name] != "none":  # tool_choice "none": no tools
            raise _unsupported(name)
    if extra.get("response_format") not in (None, {"type": "text"}):
        raise _unsupported("response_format", "only {'type': 'text'} is")
    if extra.get("best_of") not in (None, request.n):
        raise _unsupported("best_of", "only best_of equal to n is")


def check_model(requested: str | None, served: str) -> None:
    """Refuse a request for a model this server does not serve (404, as OpenAI answers);
    a request that names none (where the API allows it) gets the one served."""
    if requested is not None and requested != served:
        raise OpenAIError(
            f"The model '{requested}' does not exist; this server serves '{served}'.",
            status=404,
            param="model",
            code="model_not_found",
        )
