"""Byte-level BPE: any text round-trips, special tokens are read or split as asked.

The round trip is checked on arbitrary Unicode drawn by hypothesis (seeded, derandomized):
every code point Python can encode in UTF-8, special-token strings, control characters and
characters the corpus never uses. The bound `max_token_chars` promises is checked on the
same texts; the files `save_pretrained` writes are read back by our loader and checked
against what ``transformers`` reads (tests/model/test_llama.py loads them with it).
"""

from __future__ import annotations

import json
import threading

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from llmserve_ref.model import corpus
from llmserve_ref.model.corpus import heldout_documents
from llmserve_ref.model.tokenizer import (
    ASSISTANT,
    BOS,
    CHAT_TEMPLATE,
    EOS,
    SPECIAL_TOKENS,
    USER,
    Tokenizer,
)
from llmserve_ref.model.weights import TARGET_DIR

TOKENIZER = Tokenizer.from_file(TARGET_DIR)
SPECIAL_IDS = {TOKENIZER.bos_id, TOKENIZER.eos_id, TOKENIZER.user_id, TOKENIZER.assistant_id}
# Arbitrary text, with the special tokens' strings mixed in now and then.
TEXT = st.lists(st.one_of(st.text(max_size=20), st.sampled_from(SPECIAL_TOKENS))).map("".join)


@settings(max_examples=300, derandomize=True, deadline=None)
@given(TEXT)
@example("naïve café — “你好” 🙂 Jürgen")
@example("\x00\r\n\t \u200b\ufeff\U0010ffff")
@example("<|user|" + "|>")  # a special token's string cut in two, then joined
def test_any_text_round_trips(text):
    ids = TOKENIZER.encode(text)
    assert TOKENIZER.decode(ids) == text
    split = TOKENIZER.encode(text, split_special_tokens=True)
    assert TOKENIZER.decode(split) == text
    assert SPECIAL_IDS.isdisjoint(split)  # split: a special token's string is plain text
    assert TOKENIZER.encode(text, add_bos=True) == [TOKENIZER.bos_id, *ids]


@settings(max_examples=300, derandomize=True, deadline=None)
@given(TEXT)
def test_a_token_covers_at_most_max_token_chars_characters_and_at_least_one_byte(text):
    for ids in (TOKENIZER.encode(text), TOKENIZER.encode(text, split_special_tokens=True)):
        assert len(text) <= len(ids) * TOKENIZER.max_token_chars
        assert len(ids) <= len(text.encode("utf-8"))


def test_max_token_chars_is_reached_by_some_token():
    longest = max(range(TOKENIZER.vocab_size), key=lambda i: len(TOKENIZER.decode([i])))
    assert len(TOKENIZER.decode([longest])) == TOKENIZER.max_token_chars


def test_special_tokens_come_first_and_read_as_their_control_ids():
    assert SPECIAL_TOKENS == [BOS, EOS, USER, ASSISTANT]
    ids = [TOKENIZER.bos_id, TOKENIZER.eos_id, TOKENIZER.user_id, TOKENIZER.assistant_id]
    assert ids == [0, 1, 2, 3]
    for token, i in zip(SPECIAL_TOKENS, ids, strict=True):
        assert TOKENIZER.encode(token) == [i]
        assert TOKENIZER.decode([i]) == token
        split = TOKENIZER.encode(token, split_special_tokens=True)
        assert len(split) > 1 and i not in split


def test_skip_special_tokens_drops_them_from_the_text():
    ids = TOKENIZER.encode(f"{USER}Hello there.{ASSISTANT}Hi{EOS}", add_bos=True)
    assert TOKENIZER.decode(ids) == f"{BOS}{USER}Hello there.{ASSISTANT}Hi{EOS}"
    assert TOKENIZER.decode(ids, skip_special_tokens=True) == "Hello there.Hi"


def test_corpus_words_are_single_tokens_and_a_rare_character_is_several():
    """What BPE learned: frequent words of the stories merge, an unseen CJK character stays
    as its three UTF-8 bytes."""
    for word in ("Once", " upon", " time", " there", " was"):
        assert len(TOKENIZER.encode(word)) == 1, word
    assert len(TOKENIZER.encode("龍")) == 3
    text = " ".join(heldout_documents(20))
    assert len(TOKENIZER.encode(text)) < len(text) / 3  # several characters per token


def test_training_reaches_the_vocabulary_size_and_keeps_every_byte():
    tok = Tokenizer.train(heldout_documents(50), vocab_size=400)
    assert tok.vocab_size == 400  # 4 special tokens, 256 bytes, 140 merges
    assert [tok.bos_id, tok.eos_id, tok.user_id, tok.assistant_id] == [0, 1, 2, 3]
    assert len(tok.encode(" the")) == 1
    # A text with fewer pairs to merge than asked for stops when none is left.
    small = Tokenizer.train(["the cat sat on the mat. " * 20], vocab_size=400)
    assert small.vocab_size < 400
    assert len(small.encode("the cat sat on the mat.")) == 7  # by then every word is one token
    unseen = "Ωμέγα 🙂"  # no merge covers it: one token per byte, and back
    assert tok.decode(tok.encode(unseen)) == unseen
    assert len(tok.encode(unseen)) == len(unseen.encode())


def test_save_pretrained_writes_what_from_file_and_autotokenizer_read(tmp_path):
    TOKENIZER.save_pretrained(tmp_path)
    again = Tokenizer.from_file(tmp_path)
    assert again.backend.to_str() == TOKENIZER.backend.to_str()
    assert Tokenizer.from_file(tmp_path / "tokenizer.json").vocab_size == TOKENIZER.vocab_size
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert (config["bos_token"], config["eos_token"], config["pad_token"]) == (BOS, EOS, EOS)
    assert config["additional_special_tokens"] == [USER, ASSISTANT]
    assert config["chat_template"] == CHAT_TEMPLATE
    assert config["clean_up_tokenization_spaces"] is False  # decode must not edit the text
    special = json.loads((tmp_path / "special_tokens_map.json").read_text())
    assert special["additional_special_tokens"] == [USER, ASSISTANT]
    # The committed model directory holds the same three files, byte for byte.
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        assert (tmp_path / name).read_text() == (TARGET_DIR / name).read_text(), name


@pytest.mark.parametrize("split_first", [True, False])
def test_concurrent_encodes_never_see_each_others_setting(split_first):
    """One thread splits special tokens, another reads them as control tokens, at once."""
    text = f"{USER}Tell me a story.{ASSISTANT}"
    expected = {True: TOKENIZER.encode(text, split_special_tokens=True),
                False: TOKENIZER.encode(text)}  # fmt: skip
    assert expected[True] != expected[False]
    wrong: list[bool] = []
    start = threading.Barrier(2)

    def encode(split: bool) -> None:
        start.wait()
        for _ in range(2000):
            if TOKENIZER.encode(text, split_special_tokens=split) != expected[split]:
                wrong.append(split)

    threads = [threading.Thread(target=encode, args=(s,)) for s in (split_first, not split_first)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []


def test_hf_tokenizer_agrees_with_ours():
    tokenizer = TOKENIZER
    hf = AutoTokenizer.from_pretrained(TARGET_DIR)
    fast = PreTrainedTokenizerFast(tokenizer_file=str(TARGET_DIR / "tokenizer.json"))
    assert (hf.bos_token_id, hf.eos_token_id) == (tokenizer.bos_id, tokenizer.eos_id)
    assert len(hf) == tokenizer.vocab_size
    for text in [*corpus.heldout_documents(20), "naïve café — “你好” 🙂 Jürgen"]:
        ids = tokenizer.encode(text)
        assert hf.encode(text, add_special_tokens=False) == ids
        assert fast.encode(text, add_special_tokens=False) == ids
        assert hf(text).input_ids == [tokenizer.bos_id, *ids]
        assert hf.decode(ids) == fast.decode(ids) == tokenizer.decode(ids) == text
