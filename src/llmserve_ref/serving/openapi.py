"""The server's OpenAPI 3.1 document, served at ``GET /openapi.json``.

A machine-readable description of the API lets tools generate clients, render
reference pages, and fuzz the server: Schemathesis reads this document, sends
requests built from its schemas, and checks every answer against it.

The request bodies are not written twice: their schemas come from the pydantic
models the server validates with (`CompletionRequest`, `ChatCompletionRequest`),
so the document cannot drift from what the server accepts; only ``model`` is
narrowed to the one model served. The responses are described here: OpenAI's
completion objects and streamed chunks, and one error body for every error,
``{"error": {"message", "type", "param", "code"}}``.

>>> document = openapi_document("tiny")
>>> sorted(document["paths"])  # doctest: +NORMALIZE_WHITESPACE
['/detokenize', '/health', '/metrics', '/openapi.json', '/tokenize', '/v1/chat/completions',
 '/v1/completions', '/v1/models', '/version']
>>> sorted(document["paths"]["/v1/completions"]["post"]["responses"])
['200', '400', '401', '404', '408', '413', '415', '429', '503']
"""

from __future__ import annotations

from typing import Any

from pydantic.json_schema import models_json_schema

import llmserve_ref
from llmserve_ref.engine.interface import FinishReason
from llmserve_ref.serving.chat_requests import ChatCompletionRequest
from llmserve_ref.serving.openai_requests import CompletionRequest
from llmserve_ref.serving.tokenization import (
    DetokenizeRequest,
    TokenizeChatRequest,
    TokenizeCompletionRequest,
)

REF = "#/components/schemas/{model}"

# Every error status the server answers with, its name in the document's reusable
# responses, and what it means to the client. All of them carry the `Error` body.
ERRORS = {
    "400": (
        "BadRequest",
        "Invalid request: a field is missing, of the wrong type or out of "
        "range, the JSON does not parse, or prompt and completion do not fit the context.",
    ),
    "401": ("Unauthorized", "Missing or wrong API key (when the server was started with one)."),
    "404": ("NotFound", "The model named is not the one served, or the URL is unknown."),
    "405": ("MethodNotAllowed", "The URL exists, but not with this method (see `Allow`)."),
    "408": ("RequestTimeout", "The request body did not arrive in time."),
    "413": ("PayloadTooLarge", "The request body is larger than the server accepts."),
    "415": ("UnsupportedMediaType", "The request body is not `application/json`."),
    "429": ("TooManyRequests", "Too many requests are queued; retry after a while."),
    "503": ("ServiceUnavailable", "The server is shutting down and takes no new requests."),
}
# The header an error answer carries, by status, and what it says.
ERROR_HEADERS = {
    "401": ("WWW-Authenticate", "The scheme to authenticate with: `Bearer`."),
    "405": ("Allow", "The methods this URL takes."),
    "429": ("Retry-After", "Seconds to wait before retrying."),
}
# What the generating routes can answer. Any route answers an unknown URL with 404 and a
# wrong method with 405, so those two stand in the document's reusable responses too.
GENERATE_ERRORS = ("400", "401", "404", "408", "413", "415", "429", "503")
# What the tokenizer's routes can answer: outside /v1, they need no key (as in vLLM).
TOKENIZE_ERRORS = ("400", "404", "408", "413", "415")
TOKENIZER_REQUESTS = (TokenizeCompletionRequest, TokenizeChatRequest, DetokenizeRequest)

_NULLABLE_STRING = {"type": ["string", "null"]}
_TOKEN_COUNT = {"type": "integer", "minimum": 0}
_TOKEN_LOGPROB: dict[str, Any] = {
    "type": "object",
    "properties": {
        "token": {"type": "string"},
        "logprob": {"type": "number", "maximum": 0},
        "bytes": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 255}},
    },
    "required": ["token", "logprob", "bytes"],
}

SCHEMAS = {
    "Error": {
        "description": "OpenAI's error body: what was wrong, and which parameter.",
        "type": "object",
        "properties": {
            "error": {
                "type": "object",
                "properties": {
                    "message": {"type": "string"},
                    "type": {"type": "string"},
                    "param": _NULLABLE_STRING,
                    "code": _NULLABLE_STRING,
                },
                "required": ["message", "type", "param", "code"],
            }
        },
        "required": ["error"],
    },
    "Usage": {
        "type": "object",
        "properties": {
            "prompt_tokens": _TOKEN_COUNT,
            "completion_tokens": _TOKEN_COUNT,
            "total_tokens": _TOKEN_COUNT,
            "prompt_tokens_details": {
                "description": "Prompt tokens found in the prefix cache, not computed again.",
                "type": "object",
                "properties": {"cached_tokens": _TOKEN_COUNT},
                "required": ["cached_tokens"],
            },
        },
        "required": ["prompt_tokens", "completion_tokens", "total_tokens"],
    },
    "Timings": {
        "description": "llama.cpp's addition: prompt and generation counts, times and rates.",
        "type": "object",
        "properties": {
            name: _TOKEN_COUNT if name.endswith("_n") else {"type": "number", "minimum": 0}
            for name in (
                "prompt_n",
                "prompt_ms",
                "prompt_per_token_ms",
                "prompt_per_second",
                "predicted_n",
                "predicted_ms",
                "predicted_per_token_ms",
                "predicted_per_second",
            )
        },
    },
    "FinishReason": {"enum": [reason.value for reason in FinishReason]},
    "TokenizeResponse": {
        "type": "object",
        "properties": {
            "count": _TOKEN_COUNT,
            "max_model_len": {"type": "integer", "minimum": 1},
            "tokens": {"type": "array", "items": _TOKEN_COUNT},
            "token_strs": {"type": ["array", "null"], "items": {"type": "string"}},
        },
        "required": ["count", "max_model_len", "tokens", "token_strs"],
    },
    "DetokenizeResponse": {
        "type": "object",
        "properties": {"prompt": {"type": "string"}},
        "required": ["prompt"],
    },
    "Version": {
        "type": "object",
        "properties": {"version": {"type": "string"}},
        "required": ["version"],
    },
    "ChatLogprobs": {
        "description": "Each generated token: its text, logprob and UTF-8 bytes, and the "
        "likeliest tokens at its position (as many as `top_logprobs` asked for).",
        "type": "object",
        "properties": {
            "content": {
                "type": "array",
                "items": {
                    **_TOKEN_LOGPROB,
                    "properties": {
                        **_TOKEN_LOGPROB["properties"],
                        "top_logprobs": {"type": "array", "items": _TOKEN_LOGPROB},
                    },
                    "required": [*_TOKEN_LOGPROB["required"], "top_logprobs"],
                },
            }
        },
        "required": ["content"],
    },
    "CompletionLogprobs": {
        "description": "The completions API's legacy shape: four lists, one entry a token.",
        "type": "object",
        "properties": {
            "tokens": {"type": "array", "items": {"type": "string"}},
            "token_logprobs": {"type": "array", "items": {"type": "number"}},
            "top_logprobs": {
                "type": "array",
                "items": {"type": "object", "additionalProperties": {"type": "number"}},
            },
            "text_offset": {"type": "array", "items": _TOKEN_COUNT},
        },
        "required": ["tokens", "token_logprobs", "top_logprobs", "text_offset"],
    },
}


def _completion(object: str, choice: dict, logprobs: str, chunk: bool = False) -> dict:
    """A whole response, or one streamed `chunk` of it: `object` names it, `choice`
    describes one of its choices, `logprobs` names the schema of a choice's logprobs (null
    unless asked for). A chunk's choice has no finish reason until its last chunk; the
    usage chunk has no choices, and the others carry ``"usage": null`` when usage is asked."""
    reason = {"$ref": REF.format(model="FinishReason")}
    usage = {"$ref": REF.format(model="Usage")}
    choice_schema = {
        "type": "object",
        "properties": {
            "index": _TOKEN_COUNT,
            **choice,
            "logprobs": {"anyOf": [{"$ref": REF.format(model=logprobs)}, {"type": "null"}]},
            "finish_reason": {"anyOf": [reason, {"type": "null"}]} if chunk else reason,
        },
        "required": ["index", *choice, "finish_reason"],
    }
    return {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "object": {"const": object},
            "created": {"type": "integer"},
            "model": {"type": "string"},
            "choices": {"type": "array", "items": choice_schema, "minItems": 0 if chunk else 1},
            "usage": {"anyOf": [usage, {"type": "null"}]} if chunk else usage,
            "timings": {"$ref": REF.format(model="Timings")},
        },
        "required": ["id", "object", "created", "model", "choices", *([] if chunk else ["usage"])],
    }


_TEXT = {"text": {"type": "string"}}
_DELTA = {
    "delta": {
        "type": "object",
        "properties": {"role": {"const": "assistant"}, "content": {"type": "string"}},
    }
}
_MESSAGE = {
    "message": {
        "type": "object",
        "properties": {"role": {"const": "assistant"}, "content": {"type": "string"}},
        "required": ["role", "content"],
    }
}
SCHEMAS["Completion"] = _completion("text_completion", _TEXT, "CompletionLogprobs")
SCHEMAS["CompletionChunk"] = _completion("text_completion", _TEXT, "CompletionLogprobs", True)
SCHEMAS["ChatCompletion"] = _completion("chat.completion", _MESSAGE, "ChatLogprobs")
SCHEMAS["ChatCompletionChunk"] = _completion("chat.completion.chunk", _DELTA, "ChatLogprobs", True)


def _json(schema: str) -> dict:
    return {"application/json": {"schema": {"$ref": REF.format(model=schema)}}}


def _error(status: str) -> dict:
    """The reusable response of an error `status`: its meaning, its header, the body."""
    response = {"description": ERRORS[status][1], "content": _json("Error")}
    if status in ERROR_HEADERS:
        name, description = ERROR_HEADERS[status]
        header = {"description": description, "required": True, "schema": {"type": "string"}}
        response["headers"] = {name: header}
    return response


def _errors(statuses: tuple[str, ...]) -> dict:
    """References to the reusable error responses of `statuses`."""
    return {status: {"$ref": f"#/components/responses/{ERRORS[status][0]}"} for status in statuses}


def _generate(summary: str, request: str, response: str) -> dict:
    """A ``POST`` that generates: JSON in; JSON out, or server-sent events when streamed.

    The stream's ``schema`` describes one event, as OpenAPI 3.2's ``itemSchema`` does (3.1
    has no word for it, and Schemathesis reads a 3.1 stream's ``schema`` so): its ``data``
    is a chunk as JSON (``contentSchema``), or ``[DONE]``, the last event."""
    event = {
        "type": "object",
        "properties": {
            "data": {
                "anyOf": [
                    {"const": "[DONE]"},
                    {
                        "type": "string",
                        "contentMediaType": "application/json",
                        "contentSchema": {"$ref": REF.format(model=f"{response}Chunk")},
                    },
                ]
            }
        },
        "required": ["data"],
    }
    return {
        "post": {
            "summary": summary,
            "requestBody": {"required": True, "content": _json(request)},
            "responses": {
                "200": {
                    "description": 'The completion; with `"stream": true`, server-sent events '
                    "(`data: <chunk>`), ended by `data: [DONE]`.",
                    "content": {**_json(response), "text/event-stream": {"schema": event}},
                },
                **_errors(GENERATE_ERRORS),
            },
        }
    }


def _post(summary: str, requests: list[str], response: str) -> dict:
    """A ``POST`` of the tokenizer's routes: JSON in (any of `requests`), JSON out."""
    schema = {"anyOf": [{"$ref": REF.format(model=r)} for r in requests]}
    responses = {"200": {"description": summary, "content": _json(response)}}
    body = {"required": True, "content": {"application/json": {"schema": schema}}}
    return {
        "post": {
            "summary": summary,
            "requestBody": body,
            "responses": responses | _errors(TOKENIZE_ERRORS),
        }
    }


def _get(summary: str, content: dict, errors: tuple[str, ...] = ()) -> dict:
    """A ``GET`` that answers 200 with `content`, or one of `errors`."""
    responses = {"200": {"description": summary, "content": content}, **_errors(errors)}
    return {"get": {"summary": summary, "responses": responses}}


def openapi_document(model: str) -> dict:
    """The OpenAPI 3.1 document of a server serving `model` (a JSON-ready dict)."""
    generating, tokenizing = (CompletionRequest, ChatCompletionRequest), TOKENIZER_REQUESTS
    _, requests = models_json_schema(
        [(r, "validation") for r in (*generating, *tokenizing)], ref_template=REF
    )
    for r in generating:  # any other model is a 404
        requests["$defs"][r.__name__]["properties"]["model"] = {"type": "string", "enum": [model]}
    for schema in tokenizing:  # the tokenizer's routes may leave the model out, as vLLM's do
        named = {"anyOf": [{"type": "string", "enum": [model]}, {"type": "null"}]}
        requests["$defs"][schema.__name__]["properties"]["model"] = named
    models = _model_list(model)
    health = {"type": "object", "properties": {"status": {"const": "ok"}}, "required": ["status"]}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "llmserve-ref",
            "version": llmserve_ref.__version__,
            "description": f"An OpenAI-compatible server for the model '{model}'. Every error, "
            "from any route (an unknown URL gets 404, a wrong method 405), has the `Error` body.",
        },
        "paths": {
            "/v1/completions": _generate("Continue a prompt.", "CompletionRequest", "Completion"),
            "/v1/chat/completions": _generate(
                "The next assistant message of a conversation.",
                "ChatCompletionRequest",
                "ChatCompletion",
            ),
            "/v1/models": _get(
                "The one model served.", {"application/json": {"schema": models}}, ("401",)
            ),
            "/health": _get("The server is up.", {"application/json": {"schema": health}}),
            "/metrics": _get(
                "Prometheus text exposition of the serving metrics.",
                {"text/plain": {"schema": {"type": "string"}}},
            ),
            "/openapi.json": _get(
                "This document.", {"application/json": {"schema": {"type": "object"}}}
            ),
            "/tokenize": _post(
                "vLLM's: a prompt's or a chat's token ids, as the server counts them.",
                ["TokenizeCompletionRequest", "TokenizeChatRequest"],
                "TokenizeResponse",
            ),
            "/detokenize": _post(
                "vLLM's: the text token ids decode to.", ["DetokenizeRequest"], "DetokenizeResponse"
            ),
            "/version": _get("The server's version.", _json("Version")),
        },
        "components": {
            "schemas": {**requests["$defs"], **SCHEMAS},
            "responses": {name: _error(status) for status, (name, _) in ERRORS.items()},
        },
    }


def _model_list(model: str) -> dict:
    """The schema of ``GET /v1/models``'s answer: a list holding the one model served."""
    card = {
        "type": "object",
        "properties": {
            "id": {"const": model},
            "object": {"const": "model"},
            "created": {"type": "integer"},
            "owned_by": {"type": "string"},
            "max_model_len": {"type": "integer", "minimum": 1},
        },
        "required": ["id", "object", "created", "owned_by"],
    }
    return {
        "type": "object",
        "properties": {"object": {"const": "list"}, "data": {"type": "array", "items": card}},
        "required": ["object", "data"],
    }
