"""The story generator: seeded, split, grammatical, and carrying the characters it promises.

The checks read the generated text itself, with regular expressions written here from what
the module's docstring says a document is, not from the grammar's code: every document is
a story or a chat turn, its articles and number agreement are right, a character's role
fits their pronouns, the non-ASCII characters are there, and the held-out split is new.
"""

from __future__ import annotations

import re

import pytest

from llmserve_ref.model import corpus
from llmserve_ref.model.corpus import ASSISTANT, USER, documents

DOCS = documents(seed=7, count=2000)
OPENING = re.compile(r"Once upon a time, there was an? (\w+) (\w+) named (\w+)\.")
PRONOUNS = {name: pronouns[0] for name, pronouns in corpus.NAMES}


def stories() -> list[str]:
    """Every story of `DOCS`, a chat turn's story included (the text after ASSISTANT)."""
    return [doc.split(ASSISTANT)[-1] for doc in DOCS]


def test_the_same_seed_gives_the_same_documents_and_another_seed_others():
    assert documents(seed=7, count=2000) == DOCS
    other = documents(seed=8, count=2000)
    assert len(set(other) & set(DOCS)) == 0
    assert documents(seed=7, count=10) == DOCS[:10]  # a prefix of a longer run


def test_the_heldout_split_is_new_to_the_training_split():
    train = corpus.train_documents()
    heldout = corpus.heldout_documents()
    assert (len(train), len(heldout)) == (20_000, 500)
    assert corpus.TRAIN_SEED != corpus.HELDOUT_SEED
    assert set(heldout).isdisjoint(train)
    assert len(set(train)) > 0.99 * len(train)  # stories, not a few repeated ones


def test_every_document_is_a_story_or_a_chat_turn_and_about_one_in_five_is_a_chat():
    chats = 0
    for doc in DOCS:
        if doc.startswith(USER):
            chats += 1
            request, story = doc.removeprefix(USER).split(ASSISTANT)
            assert USER not in story and ASSISTANT not in request
            assert request.endswith((".", "?")) and "story" in request
        else:
            assert USER not in doc and ASSISTANT not in doc
            story = doc
        assert OPENING.match(story), story[:80]
        assert story.endswith(".")
    # Binomial(2000, 0.2): mean 400, standard deviation 18; this seed is one fixed draw.
    assert 300 < chats < 500


def test_a_chat_turn_gets_the_story_it_asks_for():
    named = re.compile(r"a story about an? (\w+) named (\w+)\.")
    about = re.compile(r"a story about (\w+) and an? (\w+)\?|a short story about an? (\w+)\.")
    asked = 0
    for doc in DOCS:
        if not doc.startswith(USER):
            continue
        request, story = doc.removeprefix(USER).split(ASSISTANT)
        _, role, name = OPENING.match(story).groups()
        if m := named.search(request):
            assert (role, name) == m.groups()
        elif m := about.search(request):
            hero, thing = (m[1], m[2]) if m[1] else (None, m[3])
            assert hero in (None, name)
            assert re.search(rf"found an? \w+ {thing}\b", story), (request, story)
        else:
            pytest.fail(f"a request of no known form: {request!r}")
        asked += 1
    assert asked > 300


def test_articles_agree_with_the_next_word():
    text = " ".join(DOCS)
    assert re.findall(r"\ba [aeiou]\w*", text, flags=re.IGNORECASE) == []
    assert re.findall(r"\ban [^aeiou\W]\w*", text, flags=re.IGNORECASE) == []
    assert re.search(r"\ban \w+", text)  # and there are "an"s to check


def test_counts_agree_in_number():
    """ "one cup" and "1 cup", "two cups" and "14 cups": never "one cups" or "three cup"."""
    singular = {s for s, _ in corpus.OBJECTS + corpus.FOODS} | {"coin"}
    plural = {p for _, p in corpus.OBJECTS + corpus.FOODS} | {"coins"}
    numbers = {word: n for n, word in enumerate(corpus.NUMBER_WORDS)}
    counted = re.findall(rf"\b(\d+|{'|'.join(corpus.NUMBER_WORDS)}) (\w+)", " ".join(DOCS))
    checked = 0
    for number, noun in counted:
        if noun not in singular | plural:
            continue  # "2 coins" counts; "4 o'clock" and "6 coins" in a price are other forms
        n = numbers[number] if number in numbers else int(number)
        assert 1 <= n <= 20
        assert noun in (singular if n == 1 else plural), (number, noun)
        checked += 1
    assert checked > 2000


def test_roles_fit_pronouns_and_verbs_fit_they():
    for story in stories():
        _, role, name = OPENING.match(story).groups()
        pronoun = PRONOUNS[name]
        assert (pronoun, role) not in {("she", "boy"), ("he", "girl")}, story[:80]
        assert story.split(". ")[1].startswith(pronoun.capitalize() + " lived")
    text = " ".join(DOCS)
    assert re.findall(r"\b(?:they|They) was\b|\b(?:she|he|She|He) were\b", text) == []
    assert "They lived" in text and "She lived" in text and "He lived" in text


def test_the_hero_and_the_friend_are_two_people():
    find = re.compile(r"to find (?:her|his|their) friend (\w+)")
    found = 0
    for story in stories():
        hero = OPENING.match(story)[3]
        for friend in find.findall(story):
            assert friend != hero
            found += 1
    assert found > 500


@pytest.mark.parametrize(
    ("text", "utf8_bytes"),
    [("é", 2), ("ü", 2), ("—", 3), ("“", 3), ("”", 3), ("你", 3), ("🙂", 4)],
)
def test_the_multibyte_characters_it_promises_are_there(text, utf8_bytes):
    """Characters of two, three and four bytes in UTF-8: what a streaming detokenizer must
    not cut in half."""
    assert len(text.encode()) == utf8_bytes
    assert sum(text in doc for doc in DOCS) > 20


def test_the_words_it_promises_are_there():
    text = " ".join(DOCS)
    for word in ("café", "Zoé", "Jürgen", "你好", "🙂"):
        assert word in text
