"""The tokenizer over HTTP, as vLLM serves it: ``/tokenize``, ``/detokenize`` and ``/version``.

A client that must count tokens before it sends a request (to fit a context, to price
it, to cut a prompt to an exact length, as ``vllm bench serve`` does) asks the server,
since only the server knows its model's tokenizer and chat template. vLLM answers on
three routes, outside ``/v1``, and this server answers the same requests the same way:

* ``POST /tokenize`` with a ``prompt`` (encoded as ``/v1/completions`` encodes it, with
  the ``<|bos|>`` when ``add_special_tokens``) or with chat ``messages`` (through the chat
  template, ending in the generation prompt when ``add_generation_prompt``) returns the
  token ids, their ``count``, the server's ``max_model_len``, and with
  ``return_token_strs`` each token's string in the vocabulary (``Ġ`` marks a space);
* ``POST /detokenize`` with ``tokens`` returns the text they decode to, as ``prompt``;
* ``GET /version`` returns the server's version.

>>> from llmserve_ref.model.tokenizer import Tokenizer
>>> from llmserve_ref.model.weights import TARGET_DIR
>>> tokenizer = Tokenizer.from_file(TARGET_DIR)
>>> tokenize(TokenizeCompletionRequest(prompt="Once upon", return_token_strs=True),
...          tokenizer, max_model_len=256)  # doctest: +NORMALIZE_WHITESPACE
{'count': 3, 'max_model_len': 256, 'tokens': [0, 348, 352],
 'token_strs': ['<|bos|>', 'Once', 'Ġupon']}
>>> detokenize(DetokenizeRequest(tokens=[348, 352]), tokenizer)
{'prompt': 'Once upon'}
"""

from __future__ import annotations

import contextlib
import json

from pydantic import Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

import llmserve_ref
from llmserve_ref.engine.interface import Engine
from llmserve_ref.model.tokenizer import Tokenizer
from llmserve_ref.serving.chat_requests import Message, chat_prompt_ids
from llmserve_ref.serving.errors import OpenAIError
from llmserve_ref.serving.limits import Limits
from llmserve_ref.serving.openai_parsing import check_model, parse, read_body
from llmserve_ref.serving.openai_requests import StrictSchema


class TokenizeCompletionRequest(StrictSchema):
    """``POST /tokenize`` with a prompt: vLLM's fields and defaults."""

    model: str | None = None
    prompt: str
    add_special_tokens: bool = True  # the <|bos|> in front
    return_token_strs: bool | None = False


class TokenizeChatRequest(StrictSchema):
    """``POST /tokenize`` with chat messages: vLLM's fields and defaults."""

    model: str | None = None
    messages: list[Message] = Field(min_length=1)
    add_generation_prompt: bool = True  # end with the open <|assistant|> turn
    continue_final_message: bool = False  # leave the last message open instead
    add_special_tokens: bool = False  # the template writes its <|bos|> itself
    return_token_strs: bool | None = False


class DetokenizeRequest(StrictSchema):
    """``POST /detokenize``."""

    model: str | None = None
    tokens: list[int]


def tokenize(
    request: TokenizeCompletionRequest | TokenizeChatRequest,
    tokenizer: Tokenizer,
    max_model_len: int,
) -> dict:
    """vLLM's ``TokenizeResponse`` for `request`."""
    if isinstance(request, TokenizeChatRequest):
        ids = chat_prompt_ids(
            request.messages,
            tokenizer,
            request.add_generation_prompt,
            request.continue_final_message,
        )
        ids = [tokenizer.bos_id, *ids] if request.add_special_tokens else ids
    else:
        ids = tokenizer.encode(request.prompt, add_bos=request.add_special_tokens)
    strs = [tokenizer.backend.id_to_token(i) for i in ids] if request.return_token_strs else None
    return {"count": len(ids), "max_model_len": max_model_len, "tokens": ids, "token_strs": strs}


def detokenize(request: DetokenizeRequest, tokenizer: Tokenizer) -> dict:
    """vLLM's ``DetokenizeResponse``: the text `request`'s token ids decode to."""
    outside = [t for t in request.tokens if not 0 <= t < tokenizer.vocab_size]
    if outside:
        raise OpenAIError(
            f"Token ids {outside[:8]} are outside the vocabulary [0, {tokenizer.vocab_size}).",
            param="tokens",
            code="invalid_value",
        )
    return {"prompt": tokenizer.decode(request.tokens)}


class TokenizerRoutes:
    """The three routes, for one engine's tokenizer under one model name."""

    def __init__(self, engine: Engine, model: str, limits: Limits) -> None:
        self.engine, self.model, self.limits = engine, model, limits

    async def tokenize(self, request: Request) -> Response:
        body = await read_body(request, self.limits)
        parsed: TokenizeChatRequest | TokenizeCompletionRequest
        if has_messages(body):
            parsed = parse(body, TokenizeChatRequest)
        else:
            parsed = parse(body, TokenizeCompletionRequest)
        check_model(parsed.model, self.model)
        answer = tokenize(parsed, self.engine.tokenizer, self.engine.max_model_len)
        return JSONResponse(answer)

    async def detokenize(self, request: Request) -> Response:
        parsed = parse(await read_body(request, self.limits), DetokenizeRequest)
        check_model(parsed.model, self.model)
        return JSONResponse(detokenize(parsed, self.engine.tokenizer))

    async def version(self, request: Request) -> Response:
        return JSONResponse({"version": llmserve_ref.__version__})


def has_messages(body: bytes) -> bool:
    """Whether a ``/tokenize`` body is the chat shape (vLLM tells the two apart by it)."""
    with contextlib.suppress(ValueError):
        data = json.loads(body)
        return isinstance(data, dict) and "messages" in data
    return False  # not JSON: parsing it as a prompt says what is wrong
