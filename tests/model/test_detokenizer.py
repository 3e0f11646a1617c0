"""Incremental detokenization: no split character ever reaches a client as U+FFFD, and stop
strings are cut out however the tokens fall."""

from __future__ import annotations

import gc
import itertools
import weakref

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from llmserve_ref.model.corpus import heldout_documents
from llmserve_ref.model.detokenizer import Detokenizer, StopStrings, TextStream, token_bytes
from llmserve_ref.model.tokenizer import Tokenizer
from llmserve_ref.model.weights import TARGET_DIR

TOKENIZER = Tokenizer.from_file(TARGET_DIR)
# Characters of two, three and four bytes in UTF-8, as in the corpus.
MULTIBYTE = "éüß—“”你好🙂"


PIECES = token_bytes(TOKENIZER)
BYTE_TOKEN = {piece[0]: i for i, piece in enumerate(PIECES) if len(piece) == 1}


def byte_tokens(text: str) -> list[int]:
    """`text` as one token per byte: every multi-byte character is split."""
    return [BYTE_TOKEN[b] for b in text.encode()]


def test_token_bytes_concatenate_to_the_utf8_of_the_text():
    for text in heldout_documents(50):
        ids = TOKENIZER.encode(text)
        assert b"".join(PIECES[i] for i in ids) == text.encode()


def test_every_byte_has_a_token_and_special_tokens_are_their_text():
    assert set(BYTE_TOKEN) == set(range(256))
    assert PIECES[TOKENIZER.eos_id] == b"<|eos|>"


def test_the_vocabulary_is_read_once_per_tokenizer_and_does_not_keep_it_alive():
    """Every request's Detokenizer shares one reading of the vocabulary; another tokenizer
    (the same file, loaded again) gets its own, equal one, gone with the tokenizer."""
    other = Tokenizer.from_file(TARGET_DIR)
    assert Detokenizer(TOKENIZER).pieces is Detokenizer(TOKENIZER).pieces is PIECES
    assert token_bytes(other) == PIECES and token_bytes(other) is not PIECES
    alive = weakref.ref(other)
    del other
    gc.collect()
    assert alive() is None


def test_the_corpus_splits_characters_when_decoded_token_by_token():
    """The problem is real: decoding each byte token alone gives U+FFFD."""
    assert "\ufffd" in "".join(TOKENIZER.decode([i]) for i in byte_tokens("café 🙂"))


@pytest.mark.parametrize("char", list(MULTIBYTE))
def test_a_split_character_waits_for_its_last_byte(char):
    d = Detokenizer(TOKENIZER)
    ids = byte_tokens(char)
    out = [d.step(i) for i in ids]
    assert out == [""] * (len(ids) - 1) + [char]
    assert d.flush() == ""


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.text(alphabet=st.sampled_from(list("ab .,") + list(MULTIBYTE)), max_size=30))
def test_streamed_text_equals_the_decoded_text_and_never_has_a_replacement(text):
    for ids in (TOKENIZER.encode(text), byte_tokens(text)):
        d = Detokenizer(TOKENIZER)
        pieces = [d.step(i) for i in ids] + [d.flush()]
        assert all("\ufffd" not in p for p in pieces)
        assert "".join(pieces) == text == TOKENIZER.decode(ids)


def test_a_character_that_never_finishes_becomes_one_replacement_at_the_end():
    d = Detokenizer(TOKENIZER)
    assert [d.step(i) for i in byte_tokens("🙂")[:2]] == ["", ""]
    assert d.flush() == "\ufffd"


def test_special_tokens_are_skipped_unless_asked_for():
    ids = [TOKENIZER.bos_id, *TOKENIZER.encode("hi"), TOKENIZER.eos_id]
    assert "".join(Detokenizer(TOKENIZER).step(i) for i in ids) == "hi"
    d = Detokenizer(TOKENIZER, skip_special_tokens=False)
    assert "".join(d.step(i) for i in ids) == "<|bos|>hi<|eos|>"


def test_a_stop_string_across_tokens_is_not_emitted():
    ids = TOKENIZER.encode("She smiled. The end. More text")
    stream = TextStream(TOKENIZER, stop=["The end"])
    out = "".join(stream.step(i) for i in ids)
    assert stream.stopped
    assert out + stream.flush() == "She smiled. "


def test_held_back_text_is_released_when_it_is_not_a_stop_string():
    stops = StopStrings(["The end"])
    assert stops.feed("She said The") == "She said "
    assert stops.feed(" en") == ""
    assert stops.feed("ormous cat") == "The enormous cat"
    assert stops.flush() == ""


def test_the_earliest_of_several_stop_strings_wins_and_nothing_follows():
    stops = StopStrings(["cat", "dog"])
    assert stops.feed("a dog and a cat") == "a "
    assert stops.stopped
    assert stops.feed("more") == "" and stops.flush() == ""


def test_at_the_end_held_back_text_is_flushed():
    stops = StopStrings(["The end"])
    assert stops.feed("it was The e") == "it was "
    assert stops.flush() == "The e"


@settings(max_examples=300, deadline=None, derandomize=True)
@example(text=" aa", stop=["a", " aa"], cuts=[2])  # 'a' completes first, ' aa' starts first
@given(
    text=st.text(alphabet="ab c", max_size=40),
    stop=st.lists(st.text(alphabet="ab c", min_size=1, max_size=4), max_size=3),
    cuts=st.lists(st.integers(0, 40), max_size=10),
)
def test_stop_strings_cut_exactly_where_the_first_one_starts(text, stop, cuts):
    found = [i for i in (text.find(s) for s in stop) if i >= 0]
    expected = text[: min(found)] if found else text
    bounds = sorted({0, len(text), *(c for c in cuts if c <= len(text))})
    stops = StopStrings(stop)
    out = "".join(stops.feed(text[a:b]) for a, b in itertools.pairwise(bounds))
    assert out + stops.flush() == expected
    assert stops.stopped == bool(found)
