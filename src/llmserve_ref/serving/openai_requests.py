"""The OpenAI API's requests: what a client may send, checked, and what it asks of the engine.

This module holds what both generating endpoints share (`OpenAIRequest`) and
``/v1/completions``' own request; ``/v1/chat/completions``' is
`llmserve_ref.serving.chat_requests`.

Clients (the official ``openai`` packages, curl, LangChain, a benchmark tool)
speak this JSON, so a server that speaks it exactly can be swapped in for
OpenAI, vLLM, Ollama or llama.cpp's ``llama-server`` by changing a base URL.

* Requests are checked by pydantic models in strict mode: a wrong type is an
  error, not a silent conversion (`llmserve_ref.serving.openai_parsing` turns any
  problem into an `OpenAIError` whose ``param`` names the field).
* A checked request becomes engine requests here, next to its schema:
  ``encode_prompt`` gives the prompt's token ids, ``engine_requests`` the ``n``
  sequences to generate, each with the `SamplingParams` of the request's fields of
  the same names.
* What differs between the two endpoints is a method of each request class, so the
  handler never asks which one it holds: how the prompt is encoded, how long it may
  be, how many tokens to generate by default, and the shapes of the answer (a chat
  ``message`` or ``delta``, a completion ``text``; the two shapes of logprobs,
  built by `llmserve_ref.serving.openai_responses`).

>>> request = CompletionRequest.model_validate_json('{"model": "tiny", "prompt": "Once"}')
>>> request.temperature, request.n, request.stream
(1.0, 1, False)
>>> request.choice(0, " upon", "length")
{'index': 0, 'text': ' upon', 'logprobs': None, 'finish_reason': 'length'}
>>> request.completion_budget(prompt_len=250, max_model_len=256)  # OpenAI's default, or less
6
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Sequence
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from llmserve_ref.engine.interface import EngineRequest
from llmserve_ref.model.sampling import (
    SamplingParamError,
    SamplingParams,
    TokenLogprobs,
)
from llmserve_ref.model.tokenizer import Tokenizer
from llmserve_ref.serving.errors import OpenAIError
from llmserve_ref.serving.openai_responses import completion_logprobs

# The sampler's knobs that a request sets by the same names (`logprobs` aside: each
# endpoint asks for it its own way, `num_logprobs`), and their defaults, which are OpenAI's.
SAMPLER_FIELDS = tuple(f.name for f in dataclasses.fields(SamplingParams) if f.name != "logprobs")
_SAMPLER = SamplingParams()


class StrictSchema(BaseModel):
    """Strict types (``"0.5"`` is not a number); unknown fields ignored, as OpenAI does."""

    model_config = ConfigDict(extra="ignore", strict=True)


class StreamOptions(StrictSchema):
    include_usage: bool = False


class OpenAIRequest(StrictSchema):
    """Fields both endpoints share. Fields it does not declare are kept aside
    (``model_extra``) for `llmserve_ref.serving.openai_parsing.check_supported`, and
    otherwise ignored.

    The sampler's knobs (`SAMPLER_FIELDS`) are declared here with their JSON types; their
    defaults and their ranges are `SamplingParams`' own, checked when `sampling_params`
    makes one."""

    model_config = ConfigDict(extra="allow", strict=True)
    prompt_field: ClassVar[str]  # the field that holds the prompt, for error messages
    object_name: ClassVar[str]  # a whole response's "object"
    chunk_object_name: ClassVar[str]  # a streamed chunk's
    id_prefix: ClassVar[str]

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
    logit_bias: dict[int, float] | None = None  # as SamplingParams: no bias
    min_tokens: int = _SAMPLER.min_tokens  # vLLM's: no stop token before this many tokens

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

    # What the request asks of the engine.

    @abc.abstractmethod
    def encode_prompt(self, tokenizer: Tokenizer) -> list[int]:
        """The prompt's token ids, or the `OpenAIError` naming what cannot be encoded."""

    @abc.abstractmethod
    def prompt_chars(self) -> int:
        """The prompt's length in characters, known before tokenizing it."""

    def completion_budget(self, prompt_len: int, max_model_len: int) -> int:
        """How many tokens each choice may generate: the request's limit, or OpenAI's
        default, refused (naming the field) unless it fits the context after the prompt
        and leaves room for ``min_tokens``."""
        what, room = self.prompt_field, max_model_len - prompt_len
        if room < 1:
            raise OpenAIError(
                f"This model's maximum context length is {max_model_len} tokens. However, your "
                f"{what} resulted in {prompt_len} tokens, leaving no room for a completion. "
                f"Please reduce the length of the {what}.",
                param=what,
                code="context_length_exceeded",
            )
        max_tokens, field = self.token_limit()
        if max_tokens is None:
            max_tokens = self.default_max_tokens(room)
        if max_tokens > room:
            raise OpenAIError(
                f"This model's maximum context length is {max_model_len} tokens. However, you "
                f"requested {prompt_len + max_tokens} tokens ({prompt_len} in the {what}, "
                f"{max_tokens} in the completion). Please reduce the length of the {what} or "
                f"{field}.",
                param=field,
                code="context_length_exceeded",
            )
        if self.min_tokens > max_tokens:  # vLLM refuses it too
            raise OpenAIError(
                f"min_tokens ({self.min_tokens}) must be at most {field} ({max_tokens}).",
                param="min_tokens",
                code="invalid_value",
            )
        return max_tokens

    def engine_requests(
        self, prompt_ids: list[int], max_model_len: int, vocab_size: int
    ) -> list[EngineRequest]:
        """The request's ``n`` choices as requests to an engine with this context length and
        vocabulary, or the `OpenAIError` that names the field it cannot serve."""
        max_tokens = self.completion_budget(len(prompt_ids), max_model_len)
        params = self.sampling_params(vocab_size)
        # Choice i samples with seed + i: reproducible, yet the n choices differ. Choices
        # after the first are forks of it: a paged engine shares the prompt's KV blocks.
        requests: list[EngineRequest] = []
        for i in range(self.n):
            requests.append(
                EngineRequest(
                    prompt_ids,
                    params
                    if self.seed is None
                    else dataclasses.replace(params, seed=self.seed + i),
                    max_tokens,
                    self.stop_strings(),
                    ignore_eos=self.ignore_eos,
                    cache_salt=self.cache_salt,
                    fork_of=requests[0].request_id if requests else None,
                )
            )
        return requests

    # The shapes of the answer.

    def echo_text(self, prompt_ids: list[int], tokenizer: Tokenizer) -> str:
        """What each choice's text starts with (nothing, unless a completion asks for ``echo``)."""
        return ""

    @abc.abstractmethod
    def choice(
        self, index: int, text: str, finish_reason: str | None, logprobs: dict | None = None
    ) -> dict:
        """A whole choice of a response that is not streamed."""

    @abc.abstractmethod
    def delta(
        self, index: int, text: str | None, finish_reason: str | None, logprobs: dict | None = None
    ) -> dict:
        """A streamed choice's piece: `text` (None: none) and, on its last, the finish reason."""

    @abc.abstractmethod
    def opening(self, n: int, echo: str) -> list[dict]:
        """The choices of the chunk a stream starts with (none: no such chunk)."""

    @abc.abstractmethod
    def logprobs_json(
        self, tokens: Sequence[tuple[int, TokenLogprobs]], tokenizer: Tokenizer, text_offset: int
    ) -> tuple[dict, int]:
        """The ``logprobs`` of a choice's `tokens` in this endpoint's shape, and the text
        offset after them (the completions API counts characters; chat does not)."""


class CompletionRequest(OpenAIRequest):
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

    def encode_prompt(self, tokenizer: Tokenizer) -> list[int]:
        """A text prompt is the caller's own template, so its special-token strings are the
        tokens, after a BOS, as vLLM's /v1/completions reads them; token ids are used as
        they are."""
        if isinstance(self.prompt, str):
            return tokenizer.encode(self.prompt, add_bos=True)
        if not self.prompt or not all(0 <= t < tokenizer.vocab_size for t in self.prompt):
            raise OpenAIError(
                f"A prompt of token ids must be non-empty, each id in [0, {tokenizer.vocab_size}).",
                param="prompt",
                code="invalid_value",
            )
        return list(self.prompt)

    def prompt_chars(self) -> int:
        return len(self.prompt)  # token ids: at most one "character" each

    def echo_text(self, prompt_ids: list[int], tokenizer: Tokenizer) -> str:
        """The prompt, if ``echo`` asks for it (a prompt of token ids decoded, as vLLM does)."""
        if not self.echo:
            return ""
        return self.prompt if isinstance(self.prompt, str) else tokenizer.decode(prompt_ids)

    object_name: ClassVar[str] = "text_completion"
    chunk_object_name: ClassVar[str] = "text_completion"  # streamed completions reuse it
    id_prefix: ClassVar[str] = "cmpl"

    def choice(
        self, index: int, text: str, finish_reason: str | None, logprobs: dict | None = None
    ) -> dict:
        return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}

    def delta(
        self, index: int, text: str | None, finish_reason: str | None, logprobs: dict | None = None
    ) -> dict:
        return self.choice(index, text or "", finish_reason, logprobs)

    def opening(self, n: int, echo: str) -> list[dict]:
        """With ``echo``, each choice's text starts with the prompt."""
        return [self.delta(i, echo, None) for i in range(n)] if echo else []

    def logprobs_json(
        self, tokens: Sequence[tuple[int, TokenLogprobs]], tokenizer: Tokenizer, text_offset: int
    ) -> tuple[dict, int]:
        body = completion_logprobs(tokens, tokenizer, text_offset)
        return body, text_offset + sum(map(len, body["tokens"]))
