"""Byte-level BPE: how text becomes the integer token ids a model reads.

Byte-level BPE (GPT-2's scheme, used by Llama 3 and most models since) starts
from the 256 possible bytes, so any string can be encoded, and learns merges of
frequent byte pairs until the vocabulary reaches its target size. Frequent
words become one token; rare characters stay as several byte tokens, which is
why a multi-byte UTF-8 character such as ``🙂`` can end up split across tokens
and why a streaming decoder must not print half a character.

We train it with Hugging Face `tokenizers` on our own corpus and save a
``tokenizer.json`` that ``transformers.PreTrainedTokenizerFast`` (and so
``AutoTokenizer``) loads unchanged. Special tokens come first in the vocabulary:
``<|bos|>`` starts every document, ``<|eos|>`` ends it, and ``<|user|>`` /
``<|assistant|>`` mark the turns of a chat.

A special token's *string* can also appear in text. `Tokenizer.encode` reads it as
the control token by default, as ``transformers`` and vLLM do for a raw completion
prompt (which is the caller's own template); with ``split_special_tokens=True`` it
is plain text, which is how the chat template encodes what users write, so that a
message cannot open a turn of its own.

>>> tok = Tokenizer.train(["the cat sat on the mat. " * 20], vocab_size=300)
>>> ids = tok.encode("the cat")
>>> tok.decode(ids)
'the cat'
>>> tok.decode([tok.bos_id]), tok.eos_id
('<|bos|>', 1)
>>> tok.encode("<|user|>"), tok.user_id in tok.encode("<|user|>", split_special_tokens=True)
([2], False)
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, processors, trainers

BOS, EOS, USER, ASSISTANT = "<|bos|>", "<|eos|>", "<|user|>", "<|assistant|>"
SPECIAL_TOKENS = [BOS, EOS, USER, ASSISTANT]

# A chat template in the Jinja dialect `transformers` uses, so that
# `tokenizer.apply_chat_template(messages)` writes what the models were trained on.
# `llmserve_ref.model.chat_template.render` is its Python twin (and says why system
# messages go in front of the first user message); raise_exception is the function
# `transformers`, vLLM and llama.cpp give templates for refusing a conversation.
CHAT_TEMPLATE = (
    "{% set ns = namespace(system='', started=false) %}{{ '<|bos|>' }}"
    "{% for message in messages %}"
    "{% if message['role'] in ['system', 'developer'] %}"
    "{% if ns.started %}{{ raise_exception('messages[' ~ loop.index0 ~ '] is a '"
    " ~ message['role'] ~ ' message after the conversation began: move it to the start.') }}"
    "{% endif %}{% set ns.system = ns.system + message['content'] + '\\n\\n' %}"
    "{% elif message['role'] == 'user' %}{{ '<|user|>' + ns.system + message['content'] }}"
    "{% set ns.system = '' %}{% set ns.started = true %}"
    "{% elif message['role'] == 'assistant' %}"
    "{% if ns.system %}{{ raise_exception('messages[' ~ loop.index0 ~ '] is an assistant"
    " message right after a system message: put a user message after it.') }}{% endif %}"
    "{{ '<|assistant|>' + message['content'] + '<|eos|>' }}{% set ns.started = true %}"
    "{% else %}{{ raise_exception('messages[' ~ loop.index0 ~ '] has role ' ~ message['role']"
    " ~ ', which this chat template cannot render.') }}"
    "{% endif %}{% endfor %}"
    "{% if ns.system %}{{ raise_exception('system instructions but no user message.') }}"
    "{% endif %}{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)


class Tokenizer:
    """A thin wrapper over a Hugging Face `tokenizers.Tokenizer`: text in, ids out, and back."""

    def __init__(self, backend: HFTokenizer) -> None:
        self.backend = backend
        # A copy that reads special-token strings as plain text (`tokenizers`' own switch,
        # which `transformers` calls split_special_tokens). A copy, not a flag flipped per
        # call, so that concurrent encodes never see each other's setting.
        self._literal = HFTokenizer.from_str(backend.to_str())
        self._literal.encode_special_tokens = True
        self.bos_id, self.eos_id, self.user_id, self.assistant_id = (
            _special_id(backend, token) for token in (BOS, EOS, USER, ASSISTANT)
        )

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int = 1024) -> Tokenizer:
        """Learn byte-level BPE merges from `texts` until there are `vocab_size` tokens."""
        backend = HFTokenizer(models.BPE())
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        backend.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=SPECIAL_TOKENS,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        backend.train_from_iterator(texts, trainer)
        # `add_special_tokens=True` (the `transformers` default) puts <|bos|> in front,
        # as every training document starts.
        backend.post_processor = processors.TemplateProcessing(
            single=f"{BOS} $A", special_tokens=[(BOS, backend.token_to_id(BOS))]
        )
        return cls(backend)

    @classmethod
    def from_file(cls, path: str | Path) -> Tokenizer:
        """Load a ``tokenizer.json`` file, or the one inside the directory `path`."""
        path = Path(path)
        if path.is_dir():
            path = path / "tokenizer.json"
        return cls(HFTokenizer.from_file(str(path)))

    @property
    def vocab_size(self) -> int:
        """How many distinct token ids there are (special tokens included)."""
        return self.backend.get_vocab_size()

    @functools.cached_property
    def max_token_chars(self) -> int:
        """The most characters one token can stand for: a text of more than
        ``n * max_token_chars`` characters is more than ``n`` tokens, known without encoding it.

        Byte-level BPE writes each byte of a token as one character of its vocabulary entry,
        and a character is at least one byte, so an entry's length bounds the characters
        the token covers (special tokens included: their text is their entry). Read once:
        the server checks every request's prompt against it.
        """
        return max(len(entry) for entry in self.backend.get_vocab(with_added_tokens=True))

    def encode(
        self, text: str, add_bos: bool = False, split_special_tokens: bool = False
    ) -> list[int]:
        """The token ids of `text`, after a BOS if `add_bos`.

        Special-token strings such as ``<|user|>`` map to their control ids, unless
        `split_special_tokens`: then they are text like any other, several ordinary tokens.
        """
        backend = self._literal if split_special_tokens else self.backend
        ids = backend.encode(text, add_special_tokens=False).ids
        return [self.bos_id, *ids] if add_bos else ids

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        """The text of `ids`. Bytes that do not yet form a whole character become ``�``."""
        return self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def save_pretrained(self, directory: str | Path) -> None:
        """Write ``tokenizer.json`` plus the two small files `AutoTokenizer` reads."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.backend.save(str(directory / "tokenizer.json"))
        special = {"bos_token": BOS, "eos_token": EOS, "pad_token": EOS}
        config = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            **special,
            "additional_special_tokens": [USER, ASSISTANT],
            "model_max_length": 1_000_000,
            "clean_up_tokenization_spaces": False,
            "chat_template": CHAT_TEMPLATE,
        }
        (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
        (directory / "special_tokens_map.json").write_text(
            json.dumps({**special, "additional_special_tokens": [USER, ASSISTANT]}, indent=2) + "\n"
        )


def _special_id(backend: HFTokenizer, token: str) -> int:
    """The id of one of our special tokens, which every tokenizer of ours has."""
    token_id = backend.token_to_id(token)
    if token_id is None:
        raise ValueError(f"this tokenizer has no {token} token: it is not one of ours")
    return token_id
