"""The OpenAI API on the wire: request schemas, response and chunk objects, error bodies.

Clients (the official ``openai`` packages, curl, LangChain, a benchmark tool)
speak this JSON, so a server that speaks it exactly can be swapped in for
OpenAI, vLLM, Ollama or llama.cpp's ``llama-server`` by changing a base URL.

* Requests are checked by pydantic models in strict mode: a wrong type is an
  error, not a silent conversion. `parse` turns any problem into an
  `OpenAIError`, which the server sends as OpenAI does::

      {"error": {"message": "...", "type": "invalid_request_error",
                 "param": "temperature", "code": "invalid_type"}}

* Responses are plain dicts built by small functions: a whole ``chat.completion``
  or ``text_completion``, or, when streaming, one chunk per event, each sent as
  a server-sent event ``data: {...}`` and the stream closed by ``data: [DONE]``.
* ``timings`` is llama.cpp's addition: prompt and generation counts, times and
  rates, on the last chunk (or the whole response).

>>> request = parse(b'{"model": "tiny", "prompt": "Once", "temperature": 0.5}', CompletionRequest)
>>> request.temperature, request.n, request.stream
(0.5, 1, False)
>>> parse(b'{"model": "tiny", "prompt": "Once", "n": "2"}', CompletionRequest)
Traceback (most recent call last):
...
llmserve_ref.serving.openai_protocol.OpenAIError: Invalid type for 'n': Input should be ...
>>> sse({"id": "x"})
'data: {"id":"x"}\\n\\n'
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from llmserve_ref.engine.interface import Timings


# --8<-- [start:error]
class OpenAIError(Exception):
    """An error the client caused (4xx) or met (5xx), with OpenAI's error body."""

    def __init__(
        self,
        message: str,
        status: int = 400,
        param: str | None = None,
        code: str | None = None,
        type: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.message, self.status, self.param, self.code, self.type = (
            message,
            status,
            param,
            code,
            type,
        )

    def body(self) -> dict:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


# --8<-- [end:error]


# --8<-- [start:requests]
class _Schema(BaseModel):
    """Strict types (``"0.5"`` is not a number); unknown fields ignored, as OpenAI does."""

    model_config = ConfigDict(extra="ignore", strict=True)


class StreamOptions(_Schema):
    include_usage: bool = False


class TextPart(_Schema):
    type: Literal["text"]
    text: str


class Message(_Schema):
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart]

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class _Sampling(_Schema):
    """Fields both endpoints share."""

    model: str
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int | None = None
    min_p: float = 0.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    stop: str | list[str] | None = None
    seed: int | None = None
    n: int = Field(default=1, ge=1, le=16)
    stream: bool = False
    stream_options: StreamOptions | None = None
    # vLLM's extensions: generate max_tokens whatever the model says (benchmarks send it),
    # and a per-tenant salt, so that only requests with the same salt share cached prefixes.
    ignore_eos: bool = False
    cache_salt: str | None = Field(default=None, min_length=1)

    def stop_strings(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)

    def token_limit(self) -> tuple[int | None, str]:
        """The most tokens to generate (None: as many as fit) and the field that said so."""
        return self.max_tokens, "max_tokens"

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage


class CompletionRequest(_Sampling):
    """``POST /v1/completions``: continue a prompt (text, or token ids used as they are)."""

    prompt: str | list[int]


class ChatCompletionRequest(_Sampling):
    """``POST /v1/chat/completions``: the next assistant message of a conversation."""

    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)

    def token_limit(self) -> tuple[int | None, str]:
        if self.max_completion_tokens is not None:  # the newer name wins
            return self.max_completion_tokens, "max_completion_tokens"
        return self.max_tokens, "max_tokens"


# --8<-- [end:requests]


# --8<-- [start:parse]
def parse(body: bytes, schema: type[_Sampling]) -> _Sampling:
    """The request in `body`, or an `OpenAIError` naming the first problem."""
    try:
        return schema.model_validate_json(body)
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


def _param(loc: tuple[str | int, ...]) -> str | None:
    """``messages[0].role`` from pydantic's location, without its union tags (``str``...)."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part.isidentifier() and part.islower() and part not in ("str", "int", "float", "bool"):
            path += f".{part}" if path else part
    return path or None


# --8<-- [end:parse]


# --8<-- [start:responses]
def sse(obj: dict | str) -> str:
    """One server-sent event: ``data: <json>`` and a blank line."""
    data = (
        obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    )
    return f"data: {data}\n\n"


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def timings(t: Timings) -> dict:
    """llama.cpp's ``timings`` object, rates included."""
    return {
        "prompt_n": t.prompt_n,
        "prompt_ms": t.prompt_ms,
        "prompt_per_token_ms": t.prompt_ms / t.prompt_n if t.prompt_n else 0.0,
        "prompt_per_second": 1e3 * t.prompt_n / t.prompt_ms if t.prompt_ms else 0.0,
        "predicted_n": t.predicted_n,
        "predicted_ms": t.predicted_ms,
        "predicted_per_token_ms": t.predicted_ms / t.predicted_n if t.predicted_n else 0.0,
        "predicted_per_second": 1e3 * t.predicted_n / t.predicted_ms if t.predicted_ms else 0.0,
    }


def completion_object(
    object: str, id: str, created: int, model: str, choices: list[dict], **extra: object
) -> dict:
    """A response or a streamed chunk: `object` is ``chat.completion``, ``text_completion``
    or ``chat.completion.chunk`` (streamed completions reuse ``text_completion``)."""
    return {
        "id": id,
        "object": object,
        "created": created,
        "model": model,
        "choices": choices,
        **extra,
    }


def choice_delta(chat: bool, index: int, text: str | None, finish_reason: str | None) -> dict:
    """A streamed choice: a chat ``delta`` (``{}`` when `text` is None), or completion ``text``."""
    delta = {} if text is None else {"content": text}
    body = {"delta": delta} if chat else {"text": text or ""}
    return {"index": index, **body, "logprobs": None, "finish_reason": finish_reason}


def choice(chat: bool, index: int, text: str, finish_reason: str | None) -> dict:
    """A whole choice of a non-streamed response."""
    body = {"message": {"role": "assistant", "content": text}} if chat else {"text": text}
    return {"index": index, **body, "logprobs": None, "finish_reason": finish_reason}


# --8<-- [end:responses]
