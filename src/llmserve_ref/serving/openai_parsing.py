"""From the bytes of a request body to a checked request, or an OpenAI error naming the field.

`parse` validates the JSON against the endpoint's schema (``CompletionRequest`` or
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

from typing import TypeVar

from pydantic import ValidationError

from llmserve_ref.serving.errors import OpenAIError
from llmserve_ref.serving.openai_requests import OpenAIRequest

Schema = TypeVar("Schema", bound=OpenAIRequest)

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
