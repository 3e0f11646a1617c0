"""A chat template: how a list of messages becomes the one string the model continues.

A model sees a single token sequence, never "messages". Its chat template is
the convention it was trained on for marking whose turn is whose. Our tiny
models learned this one (see `llmserve_ref.model.corpus`): ``<|bos|>`` opens the
conversation, ``<|user|>`` starts a user turn, ``<|assistant|>`` an
assistant's, and ``<|eos|>`` closes an assistant's turn. To ask for a reply the
template ends with an open ``<|assistant|>``, and the model writes the turn,
ending it with ``<|eos|>``, which is where the server stops.

The same template, in the Jinja dialect that ``transformers`` and llama.cpp
read, is `llmserve_ref.model.tokenizer.CHAT_TEMPLATE` (shipped in
``tokenizer_config.json`` and in our GGUF file); `render` is its Python twin, and
a test checks they agree. The models were never trained with a system prompt,
so, like the Jinja template, `render` leaves ``system`` messages out.

>>> render([{"role": "user", "content": "Tell me a story about Zoé."}])
'<|bos|><|user|>Tell me a story about Zoé.<|assistant|>'
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from llmserve_ref.model.tokenizer import ASSISTANT, BOS, EOS, USER


# --8<-- [start:render]
def render(messages: Iterable[Mapping[str, str]], add_generation_prompt: bool = True) -> str:
    """The prompt text for `messages` (dicts with ``role`` and ``content``)."""
    text = BOS
    for message in messages:
        if message["role"] == "user":
            text += USER + message["content"]
        elif message["role"] == "assistant":
            text += ASSISTANT + message["content"] + EOS
    return text + (ASSISTANT if add_generation_prompt else "")


# --8<-- [end:render]
