"""The OpenAI API on the wire: request schemas, response and chunk objects, error bodies,
and what a request asks of the engine.

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
* A checked request becomes engine requests here, next to its schema: `encode_prompt`
  gives the prompt's token ids, `engine_requests` the ``n`` sequences to generate, each
  with the `SamplingParams` of the request's fields of the same names. A value out of
  range is an `OpenAIError` whose ``param`` names the field.

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

import abc
import dataclasses
import functools
import itertools
import json
from collections.abc import Sequence
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from llmserve_ref.engine.interface import EngineRequest, Timings
from llmserve_ref.model.chat_template import render_ids
from llmserve_ref.model.detokenizer import token_bytes
from llmserve_ref.model.sampling import (
    MAX_LOGPROBS,
    SamplingParamError,
    SamplingParams,
    TokenLogprobs,
)
from llmserve_ref.model.tokenizer import Tokenizer

# The sampler's knobs that a request sets by the same names (`logprobs` aside: each
# endpoint asks for it its own way, `num_logprobs`), and their defaults, which are OpenAI's.
SAMPLER_FIELDS = tuple(f.name for f in dataclasses.fields(SamplingParams) if f.name != "logprobs")
_SAMPLER = SamplingParams()


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
    """Fields both endpoints share. Fields it does not declare are kept aside
    (``model_extra``) for `check_supported`, and otherwise ignored.

    The sampler's knobs (`SAMPLER_FIELDS`) are declared here with their JSON types; their
    defaults and their ranges are `SamplingParams`' own, checked when `sampling_params`
    makes one."""

    model_config = ConfigDict(extra="allow", strict=True)
    prompt_field: ClassVar[str]  # the field that holds the prompt, for error messages

    model: str
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float = _SAMPLER.temperature
    top_p: float = _SAMPLER.top_p
    top_k: int | None = _SAMPLER.top_k
    min_p: float = _SAMPLER.min_p
    frequency_penalty: float = _SAMPLER.frequency_penalty
    presence_penalty: float = _SAMPLER.presence_penalty
    repetition_penalty: float = _SAMPLER.repetition_penalty
    stop: str | list[str] | None = None
    seed: int | None = Field(default=_SAMPLER.seed, ge=-(2**63), le=2**63 - 1)  # int64, as vLLM
    n: int = Field(default=1, ge=1, le=16)
    stream: bool = False
    stream_options: StreamOptions | None = None
    # vLLM's extensions: generate max_tokens whatever the model says (benchmarks send it),
    # and a per-tenant salt, so that only requests with the same salt share cached prefixes.
    ignore_eos: bool = False
    cache_salt: str | None = Field(default=None, min_length=1)
    # Token id (a JSON key, so a string) -> a bias in [-100, 100] added to its logit.
    logit_bias: dict[int, float] | None = _SAMPLER.logit_bias
    min_tokens: int = _SAMPLER.min_tokens  # vLLM's: no stop token before this many tokens

    def check_supported(self) -> None:
        """Refuse a field that would change the output and that this server does not
        implement: ignoring it, as an unknown field is ignored, would answer 200 with an
        output the client did not ask for. Harmless fields (``user``, ``metadata``) pass."""
        extra = self.model_extra or {}
        for name in UNSUPPORTED:
            if extra.get(name) and extra[name] != "none":  # tool_choice "none": no tools
                raise _unsupported(name)
        if extra.get("response_format") not in (None, {"type": "text"}):
            raise _unsupported("response_format", "only {'type': 'text'} is")
        if extra.get("best_of") not in (None, self.n):
            raise _unsupported("best_of", "only best_of equal to n is")

    def stop_strings(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)

    def token_limit(self) -> tuple[int | None, str]:
        """The most tokens to generate (None: as many as fit) and the field that said so."""
        return self.max_tokens, "max_tokens"

    @abc.abstractmethod
    def default_max_tokens(self, room: int) -> int:
        """How many tokens to generate when the request does not say (OpenAI's default),
        with `room` tokens left in the context."""

    @abc.abstractmethod
    def num_logprobs(self) -> int | None:
        """How many top logprobs each token reports (None: no logprobs at all)."""

    def sampling_params(self, vocab_size: int) -> SamplingParams:
        """The sampler's settings: each of `SAMPLER_FIELDS` from the field of its name.
        A value out of range (or a `logit_bias` outside the vocabulary) is a 400 naming it."""
        try:
            knobs = {name: getattr(self, name) for name in SAMPLER_FIELDS}
            params = SamplingParams(**knobs, logprobs=self.num_logprobs())
            params.check_vocab(vocab_size)
        except SamplingParamError as error:
            raise OpenAIError(str(error), param=error.field, code="invalid_value") from None
        return params

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage


class CompletionRequest(_Sampling):
    """``POST /v1/completions``: continue a prompt (text, or token ids used as they are)."""

    prompt_field: ClassVar[str] = "prompt"
    prompt: str | list[int]
    echo: bool = False  # each choice's text starts with the prompt
    # OpenAI's legacy shape: each token's logprob and up to this many likeliest tokens.
    logprobs: int | None = Field(default=None, ge=0, le=5)

    @field_validator("logprobs")
    @classmethod
    def _no_prompt_logprobs(cls, logprobs: int | None, info: ValidationInfo) -> int | None:
        if logprobs is not None and info.data.get("echo"):
            raise ValueError(
                "echo with logprobs asks for the prompt's logprobs, which this server does "
                "not compute; send echo or logprobs, not both"
            )
        return logprobs

    def num_logprobs(self) -> int | None:
        return self.logprobs

    def default_max_tokens(self, room: int) -> int:
        return min(16, room)


class ChatCompletionRequest(_Sampling):
    """``POST /v1/chat/completions``: the next assistant message of a conversation."""

    prompt_field: ClassVar[str] = "messages"
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool = False  # each token's logprob ...
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_LOGPROBS)  # ... and the likeliest

    @field_validator("top_logprobs")
    @classmethod
    def _needs_logprobs(cls, top: int | None, info: ValidationInfo) -> int | None:
        if top and not info.data.get("logprobs"):  # vLLM and OpenAI refuse it too
            raise ValueError("top_logprobs needs logprobs set to true")
        return top

    def num_logprobs(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None

    def token_limit(self) -> tuple[int | None, str]:
        if self.max_completion_tokens is not None:  # the newer name wins
            return self.max_completion_tokens, "max_completion_tokens"
        return self.max_tokens, "max_tokens"

    def default_max_tokens(self, room: int) -> int:
        return room


# Fields of OpenAI's API (and vLLM's) that change the output, which this server does not
# implement: a request that sets one gets a 400 naming it (`_Sampling.check_supported`).
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


def parse(body: bytes, schema: type[_Sampling]) -> _Sampling:
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
    request.check_supported()
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


def encode_prompt(
    body: CompletionRequest | ChatCompletionRequest, tokenizer: Tokenizer
) -> list[int]:
    """The prompt's token ids. A chat's messages go through the chat template, their
    text encoded as text: a special token's string in a message stays text. A text
    prompt is the caller's own template, so its special-token strings are the tokens,
    after a BOS, as vLLM's /v1/completions reads them."""
    if isinstance(body, ChatCompletionRequest):
        messages = [{"role": m.role, "content": m.text()} for m in body.messages]
        try:
            return render_ids(messages, tokenizer)
        except ValueError as error:  # the template names the message it cannot place
            raise OpenAIError(str(error), param="messages", code="invalid_value") from None
    if isinstance(body.prompt, str):
        return tokenizer.encode(body.prompt, add_bos=True)
    if not body.prompt or not all(0 <= t < tokenizer.vocab_size for t in body.prompt):
        raise OpenAIError(
            f"A prompt of token ids must be non-empty, each id in [0, {tokenizer.vocab_size}).",
            param="prompt",
            code="invalid_value",
        )
    return list(body.prompt)


def completion_budget(body: _Sampling, prompt_len: int, max_model_len: int) -> int:
    """How many tokens each choice may generate: the body's limit, or OpenAI's default,
    refused (naming the field) unless it fits the context after the prompt and leaves
    room for ``min_tokens``."""
    what, room = body.prompt_field, max_model_len - prompt_len
    if room < 1:
        raise OpenAIError(
            f"This model's maximum context length is {max_model_len} tokens. However, your "
            f"{what} resulted in {prompt_len} tokens, leaving no room for a completion. "
            f"Please reduce the length of the {what}.",
            param=what,
            code="context_length_exceeded",
        )
    max_tokens, field = body.token_limit()
    if max_tokens is None:
        max_tokens = body.default_max_tokens(room)
    if max_tokens > room:
        raise OpenAIError(
            f"This model's maximum context length is {max_model_len} tokens. However, you "
            f"requested {prompt_len + max_tokens} tokens ({prompt_len} in the {what}, "
            f"{max_tokens} in the completion). Please reduce the length of the {what} or "
            f"{field}.",
            param=field,
            code="context_length_exceeded",
        )
    if body.min_tokens > max_tokens:  # vLLM refuses it too
        raise OpenAIError(
            f"min_tokens ({body.min_tokens}) must be at most {field} ({max_tokens}).",
            param="min_tokens",
            code="invalid_value",
        )
    return max_tokens


def engine_requests(
    body: _Sampling, prompt_ids: list[int], max_model_len: int, vocab_size: int
) -> list[EngineRequest]:
    """The body's ``n`` choices as requests to an engine with this context length and
    vocabulary, or the `OpenAIError` that names the field it cannot serve."""
    max_tokens = completion_budget(body, len(prompt_ids), max_model_len)
    params = body.sampling_params(vocab_size)
    # Choice i samples with seed + i: reproducible, yet the n choices differ. Choices
    # after the first are forks of it: a paged engine shares the prompt's KV blocks.
    requests: list[EngineRequest] = []
    for i in range(body.n):
        requests.append(
            EngineRequest(
                prompt_ids,
                params if body.seed is None else dataclasses.replace(params, seed=body.seed + i),
                max_tokens,
                body.stop_strings(),
                ignore_eos=body.ignore_eos,
                cache_salt=body.cache_salt,
                fork_of=requests[0].request_id if requests else None,
            )
        )
    return requests


def sse(obj: dict | str) -> str:
    """One server-sent event: ``data: <json>`` and a blank line."""
    data = (
        obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    )
    return f"data: {data}\n\n"


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> dict:
    """The usage object; `cached_tokens`: prompt tokens found in the prefix cache (OpenAI
    always reports them; vLLM 0.32 with ``--enable-prompt-tokens-details``)."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
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


def choice_delta(
    chat: bool,
    index: int,
    text: str | None,
    finish_reason: str | None,
    logprobs: dict | None = None,
) -> dict:
    """A streamed choice: a chat ``delta`` (``{}`` when `text` is None), or completion ``text``."""
    delta = {} if text is None else {"content": text}
    body = {"delta": delta} if chat else {"text": text or ""}
    return {"index": index, **body, "logprobs": logprobs, "finish_reason": finish_reason}


def choice(
    chat: bool, index: int, text: str, finish_reason: str | None, logprobs: dict | None = None
) -> dict:
    """A whole choice of a non-streamed response."""
    body = {"message": {"role": "assistant", "content": text}} if chat else {"text": text}
    return {"index": index, **body, "logprobs": logprobs, "finish_reason": finish_reason}


def logprobs_json(
    chat: bool,
    tokens: Sequence[tuple[int, TokenLogprobs]],
    tokenizer: Tokenizer,
    text_offset: int = 0,
) -> dict:
    """The ``logprobs`` of a choice (or a chunk) for its `tokens`, each a token id and its
    logprobs: chat's ``{"content": [...]}``, each token with its text, logprob, UTF-8 bytes
    and likeliest alternatives; or the completions API's legacy four parallel lists, whose
    ``text_offset`` counts characters from `text_offset`, and whose ``top_logprobs`` map
    the token itself and its likeliest alternatives to their logprobs, as vLLM and OpenAI
    do. A token's text is its own bytes decoded (``�`` for part of a character); ``bytes``
    keeps the exact bytes, so a client can join split characters."""
    pieces = _token_pieces(tokenizer)

    def text(token_id: int) -> str:
        return pieces[token_id].decode("utf-8", errors="replace")

    if chat:

        def entry(token_id: int, logprob: float) -> dict:
            return {"token": text(token_id), "logprob": logprob, "bytes": list(pieces[token_id])}

        return {
            "content": [
                {**entry(t, lp.logprob), "top_logprobs": [entry(i, v) for i, v in lp.top]}
                for t, lp in tokens
            ]
        }
    texts = [text(t) for t, _ in tokens]
    return {
        "tokens": texts,
        "token_logprobs": [lp.logprob for _, lp in tokens],
        "top_logprobs": [
            {text(t): lp.logprob, **{text(i): v for i, v in lp.top}} for t, lp in tokens
        ],
        "text_offset": list(itertools.accumulate(map(len, texts), initial=text_offset))[:-1],
    }


@functools.cache
def _token_pieces(tokenizer: Tokenizer) -> list[bytes]:
    """Every token's bytes, computed once per tokenizer."""
    return token_bytes(tokenizer)


def echo_text(
    body: CompletionRequest | ChatCompletionRequest, prompt_ids: list[int], tokenizer: Tokenizer
) -> str:
    """What each choice's text starts with: the prompt if a completion asked for ``echo``
    (a prompt of token ids decoded, as vLLM does), else nothing."""
    if not isinstance(body, CompletionRequest) or not body.echo:
        return ""
    return body.prompt if isinstance(body.prompt, str) else tokenizer.decode(prompt_ids)
