"""What one request may ask of the server, checked before it costs anything.

A server shares one engine among everyone. A request that is too big to serve must be
refused before it is read, tokenized or queued, or it costs every other client:
tokenizing a 20 MB prompt on the event loop stops every stream for seconds before the
prompt is found too long, and 20,000 stop strings slow every step of the engine. Each
limit here is checked at the cheapest point, and each refusal is an OpenAI error that
says which limit, its value, and what to send instead:

* the body's media type: JSON only (415), so that no web page can make a user's
  browser call the server without asking first (a CORS "simple" request);
* the body's size, from ``Content-Length`` before reading, then while reading (413);
* the prompt's length in characters, before tokenizing: a token stands for at most
  `Tokenizer.max_token_chars` characters, so more than ``max_model_len`` times that
  many characters cannot fit the context (400, ``context_length_exceeded``);
* how many stop strings, and how long each (400);
* how many sequences may be in flight, running or waiting: beyond that the server
  answers 429 with ``Retry-After`` instead of queueing without bound;
* how long a client may take to send its headers and its body (the connection is
  closed, or 408).

``llmserve-ref serve`` takes each as a flag (``--max-request-bytes`` and so on).

>>> limits = Limits(max_stop_strings=4)
>>> limits.check_stop(("\\n", "."))
>>> limits.check_stop(tuple("abcde"))
Traceback (most recent call last):
...
llmserve_ref.serving.errors.OpenAIError: 5 stop strings were sent; this server ...
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

from llmserve_ref.serving.errors import OpenAIError


# --8<-- [start:limits]
@dataclass(frozen=True)
class Limits:
    """The server's limits on one request; the defaults suit a shared server."""

    max_request_bytes: int = 1 << 20  # the JSON body
    max_stop_strings: int = 16  # OpenAI takes up to 4; vLLM sets no limit
    max_stop_chars: int = 256  # each stop string
    max_pending_seqs: int = 512  # sequences running or waiting; more get 429
    header_timeout_s: float = 10.0  # from connect (or the last response) to full headers
    body_timeout_s: float = 30.0  # from full headers to full body

    def check_content_length(self, header: str | None) -> None:
        """Refuse a body announced as too big before reading a byte of it."""
        if header is not None and header.isdigit() and int(header) > self.max_request_bytes:
            raise self.too_large()

    async def read_capped(self, chunks: AsyncIterator[bytes]) -> bytes:
        """The body from its `chunks`, refused (413) as soon as it passes the limit."""
        body = bytearray()
        async for chunk in chunks:
            body += chunk
            if len(body) > self.max_request_bytes:
                raise self.too_large()
        return bytes(body)

    def too_large(self) -> OpenAIError:
        return OpenAIError(
            f"The request body is larger than this server's limit of {self.max_request_bytes} "
            "bytes. Send a shorter prompt.",
            status=413,
            code="request_too_large",
        )

    def check_stop(self, stop: tuple[str, ...]) -> None:
        if len(stop) > self.max_stop_strings:
            raise OpenAIError(
                f"{len(stop)} stop strings were sent; this server accepts at most "
                f"{self.max_stop_strings}.",
                param="stop",
                code="invalid_value",
            )
        longest = max(stop, key=len, default="")
        if len(longest) > self.max_stop_chars:
            raise OpenAIError(
                f"A stop string of {len(longest)} characters was sent; this server accepts "
                f"stop strings of at most {self.max_stop_chars} characters.",
                param="stop",
                code="invalid_value",
            )

    def check_room(self, in_flight: int, more: int) -> None:
        """Refuse `more` sequences when `in_flight` already fill the queue (429: later,
        there will be room), or when they could never fit (400)."""
        if more > self.max_pending_seqs:
            raise OpenAIError(
                f"The request asks for {more} sequences (n); this server holds at most "
                f"{self.max_pending_seqs} at a time. Ask for fewer.",
                param="n",
                code="invalid_value",
            )
        if in_flight + more > self.max_pending_seqs:
            raise OpenAIError(
                f"The server is at capacity: {in_flight} sequences are running or waiting, "
                f"at most {self.max_pending_seqs}. Retry after a short wait.",
                status=429,
                code="server_overloaded",
                type="server_error",
            )


def check_prompt_chars(chars: int, max_model_len: int, max_token_chars: int, what: str) -> None:
    """Refuse a prompt too long for the context, from its length in characters alone."""
    if chars > max_model_len * max_token_chars:
        raise OpenAIError(
            f"This model's maximum context length is {max_model_len} tokens, and no token "
            f"is longer than {max_token_chars} characters; your {what} has {chars} characters, "
            f"so it cannot fit. Please reduce the length of the {what}.",
            param=what,
            code="context_length_exceeded",
        )


# --8<-- [end:limits]


def check_json_content_type(content_type: str | None) -> None:
    """Refuse a body not sent as JSON. A browser sends ``text/plain`` from any web page
    without asking (a "simple" request, no CORS preflight): without this check, any page
    a user visits could make their local server generate."""
    media_type = (content_type or "").split(";")[0].strip().lower()
    if media_type != "application/json":
        raise OpenAIError(
            f"Send the body as JSON, with 'Content-Type: application/json'; got "
            f"{content_type or 'no Content-Type'!r}.",
            415,
            code="unsupported_media_type",
        )
