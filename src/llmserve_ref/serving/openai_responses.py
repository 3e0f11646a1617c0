"""The OpenAI API's answers: completion objects, streamed chunks, usage, timings, logprobs.

Responses are plain dicts built by small functions, in the shapes OpenAI's clients read:
a whole ``chat.completion`` or ``text_completion``, or, when streaming, one chunk per
event (`llmserve_ref.serving.streams` writes each as a server-sent event). Where chat and
completions differ (a message or a text; the two shapes of logprobs) the request classes
of `llmserve_ref.serving.openai_requests` choose, each for its own endpoint.

* ``usage`` counts tokens, with ``prompt_tokens_details.cached_tokens``: the prompt
  tokens found in the prefix cache, which providers bill at a discount.
* ``timings`` is llama.cpp's addition: prompt and generation counts, times and rates,
  on the last chunk (or the whole response).

>>> usage(prompt_tokens=6, completion_tokens=3, cached_tokens=0)["total_tokens"]
9
>>> completion_object("text_completion", ResponseHead("cmpl-1", 0, "tiny"), [])["object"]
'text_completion'
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llmserve_ref.model.detokenizer import token_bytes
from llmserve_ref.model.tokenizer import Tokenizer

if TYPE_CHECKING:
    from llmserve_ref.engine.interface import Timings
    from llmserve_ref.model.sampling import TokenLogprobs


@dataclass(frozen=True)
class ResponseHead:
    """What a response and each of its chunks repeat: its id, when it began, the model."""

    id: str
    created: int  # seconds since the epoch
    model: str


def completion_object(
    object: str, head: ResponseHead, choices: list[dict], **extra: object
) -> dict:
    """A response or a streamed chunk: `object` is ``chat.completion``, ``text_completion``
    or ``chat.completion.chunk`` (streamed completions reuse ``text_completion``)."""
    return {
        "id": head.id,
        "object": object,
        "created": head.created,
        "model": head.model,
        "choices": choices,
        **extra,
    }


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


def chat_logprobs(tokens: Sequence[tuple[int, TokenLogprobs]], tokenizer: Tokenizer) -> dict:
    """Chat's ``logprobs``: ``{"content": [...]}``, each token with its text, logprob,
    UTF-8 bytes and likeliest alternatives. A token's text is its own bytes decoded (``�``
    for part of a character); ``bytes`` keeps the exact bytes, so a client can join split
    characters."""

    def entry(token_id: int, logprob: float) -> dict:
        return {
            "token": token_text(tokenizer, token_id),
            "logprob": logprob,
            "bytes": list(token_bytes(tokenizer)[token_id]),
        }

    return {
        "content": [
            {**entry(t, lp.logprob), "top_logprobs": [entry(i, v) for i, v in lp.top]}
            for t, lp in tokens
        ]
    }


def completion_logprobs(
    tokens: Sequence[tuple[int, TokenLogprobs]], tokenizer: Tokenizer, text_offset: int
) -> dict:
    """The completions API's legacy ``logprobs``: four parallel lists, whose ``text_offset``
    counts characters from `text_offset`, and whose ``top_logprobs`` map the token itself
    and its likeliest alternatives to their logprobs, as vLLM and OpenAI do."""
    texts = [token_text(tokenizer, t) for t, _ in tokens]
    return {
        "tokens": texts,
        "token_logprobs": [lp.logprob for _, lp in tokens],
        "top_logprobs": [
            {token_text(tokenizer, t): lp.logprob}
            | {token_text(tokenizer, i): v for i, v in lp.top}
            for t, lp in tokens
        ],
        "text_offset": list(itertools.accumulate(map(len, texts), initial=text_offset))[:-1],
    }


def token_text(tokenizer: Tokenizer, token_id: int) -> str:
    """A token's own bytes as text (``�`` for part of a character)."""
    return token_bytes(tokenizer)[token_id].decode("utf-8", errors="replace")
