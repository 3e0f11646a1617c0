"""``/v1/chat/completions``' request: messages, the chat template, and the answer's shapes.

A chat request is an `llmserve_ref.serving.openai_requests.OpenAIRequest` whose prompt
is a list of messages. They reach the model through its chat template
(`llmserve_ref.model.chat_template`), with vLLM's two switches for how the prompt ends:
``add_generation_prompt`` opens the assistant's turn (the default), and
``continue_final_message`` leaves the last message open instead, so that the reply
continues a partial answer (``/tokenize`` takes the same two, `chat_prompt_ids`).

>>> body = '{"model": "tiny", "messages": [{"role": "user", "content": "Hi"}]}'
>>> request = ChatCompletionRequest.model_validate_json(body)
>>> request.choice(0, "Once", "stop")["message"]
{'role': 'assistant', 'content': 'Once'}
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator

from llmserve_ref.model.chat_template import render_ids
from llmserve_ref.model.sampling import MAX_LOGPROBS, TokenLogprobs
from llmserve_ref.model.tokenizer import Tokenizer
from llmserve_ref.serving.errors import OpenAIError
from llmserve_ref.serving.openai_requests import OpenAIRequest, StrictSchema
from llmserve_ref.serving.openai_responses import chat_logprobs


class TextPart(StrictSchema):
    type: Literal["text"]
    text: str


class Message(StrictSchema):
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart]

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


def chat_prompt_ids(
    messages: Sequence[Message],
    tokenizer: Tokenizer,
    add_generation_prompt: bool,
    continue_final_message: bool,
) -> list[int]:
    """`messages` through the chat template, their text encoded as text (a special token's
    string in a message stays text); vLLM's two switches say how the prompt ends: with a
    new assistant turn opened, or with the last message left open to be continued."""
    if add_generation_prompt and continue_final_message:
        raise OpenAIError(
            "Cannot set both continue_final_message and add_generation_prompt to true: "
            "continue the last message, or open a new assistant turn.",
            param="continue_final_message",
        )
    plain = [{"role": m.role, "content": m.text()} for m in messages]
    try:
        return render_ids(plain, tokenizer, add_generation_prompt, continue_final_message)
    except ValueError as error:  # the template names the message it cannot place
        raise OpenAIError(str(error), param="messages", code="invalid_value") from None


class ChatCompletionRequest(OpenAIRequest):
    """``POST /v1/chat/completions``: the next assistant message of a conversation."""

    prompt_field: ClassVar[str] = "messages"
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool = False  # each token's logprob ...
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_LOGPROBS)  # ... and the likeliest
    add_generation_prompt: bool = True  # vLLM's: open the assistant's turn after the messages
    continue_final_message: bool = False  # ... or continue the last (assistant) message

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

    def encode_prompt(self, tokenizer: Tokenizer) -> list[int]:
        return chat_prompt_ids(
            self.messages, tokenizer, self.add_generation_prompt, self.continue_final_message
        )

    def prompt_chars(self) -> int:
        return sum(len(m.text()) for m in self.messages)

    object_name: ClassVar[str] = "chat.completion"
    chunk_object_name: ClassVar[str] = "chat.completion.chunk"
    id_prefix: ClassVar[str] = "chatcmpl"

    def choice(
        self, index: int, text: str, finish_reason: str | None, logprobs: dict | None = None
    ) -> dict:
        message = {"role": "assistant", "content": text}
        return {
            "index": index,
            "message": message,
            "logprobs": logprobs,
            "finish_reason": finish_reason,
        }

    def delta(
        self, index: int, text: str | None, finish_reason: str | None, logprobs: dict | None = None
    ) -> dict:
        delta = {} if text is None else {"content": text}
        return {
            "index": index,
            "delta": delta,
            "logprobs": logprobs,
            "finish_reason": finish_reason,
        }

    def opening(self, n: int, echo: str) -> list[dict]:
        """A chat stream first announces the assistant's role, in every choice."""
        role = {"role": "assistant", "content": ""}
        return [
            {"index": i, "delta": role, "logprobs": None, "finish_reason": None} for i in range(n)
        ]

    def logprobs_json(
        self, tokens: Sequence[tuple[int, TokenLogprobs]], tokenizer: Tokenizer, text_offset: int
    ) -> tuple[dict, int]:
        return chat_logprobs(tokens, tokenizer), text_offset
