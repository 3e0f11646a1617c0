"""The training text for the tiny models, written by a seeded story generator.

We ship our own models, so we need our own text: no third-party corpus is
downloaded or committed. A small probabilistic grammar writes short stories
about a cast of characters, the places they go, the things they find, what they
say to each other and how many of something they count. The vocabulary is a few
hundred words, which a model of a few million parameters learns in minutes, so
its samples read as English.

A few words carry non-ASCII characters on purpose (``café``, ``Zoé``,
``Jürgen``, the em dash, “curly quotes”, ``你好``, ``🙂``): in UTF-8 they take
two to four bytes, and a byte-level tokenizer may split one character across
two tokens, which is exactly what a streaming detokenizer has to get right.

About one document in five is a chat turn: a user asks for a story and the
assistant tells one, marked with the special tokens ``<|user|>`` and
``<|assistant|>`` so that a chat template has something to stand on.

The same seed always gives the same documents; the held-out split comes from a
different seed, so its stories are new combinations the model never saw.

>>> docs = documents(seed=0, count=2)
>>> docs == documents(seed=0, count=2)
True
>>> docs[0].split(". ")[0]
'Once upon a time, there was a quiet girl named Ivy'
"""

from __future__ import annotations

import random
from dataclasses import dataclass

USER = "<|user|>"
ASSISTANT = "<|assistant|>"

TRAIN_SEED = 1234
HELDOUT_SEED = 98765

# Characters: name, pronoun set (subject, object, possessive).
SHE = ("she", "her", "her")
HE = ("he", "him", "his")
THEY = ("they", "them", "their")
NAMES = [
    ("Mia", SHE),
    ("Tom", HE),
    ("Lena", SHE),
    ("Omar", HE),
    ("Zoé", SHE),
    ("Jürgen", HE),
    ("Ava", SHE),
    ("Ben", HE),
    ("Sam", THEY),
    ("Nora", SHE),
    ("Leo", HE),
    ("Ruby", SHE),
    ("Kai", THEY),
    ("Ivy", SHE),
    ("Max", HE),
    ("Wei", HE),
    ("Amélie", SHE),
    ("Finn", HE),
    ("Rosa", SHE),
    ("Eli", THEY),
]
ROLES = [
    "girl",
    "boy",
    "baker",
    "farmer",
    "painter",
    "sailor",
    "teacher",
    "dragon",
    "robot",
    "fox",
    "rabbit",
    "bear",
    "cat",
    "mouse",
    "owl",
    "knight",
]
ADJECTIVES = [
    "kind",
    "brave",
    "small",
    "tall",
    "quiet",
    "curious",
    "happy",
    "sleepy",
    "clever",
    "shy",
    "funny",
    "old",
    "young",
    "busy",
    "gentle",
    "proud",
]
COLORS = ["red", "blue", "green", "yellow", "purple", "orange", "white", "black", "golden"]
# Objects: singular, plural.
OBJECTS = [
    ("ball", "balls"),
    ("box", "boxes"),
    ("key", "keys"),
    ("book", "books"),
    ("hat", "hats"),
    ("kite", "kites"),
    ("shell", "shells"),
    ("stone", "stones"),
    ("map", "maps"),
    ("lamp", "lamps"),
    ("cup", "cups"),
    ("coin", "coins"),
    ("feather", "feathers"),
    ("letter", "letters"),
    ("flower", "flowers"),
    ("boat", "boats"),
    ("star", "stars"),
    ("bell", "bells"),
    ("apple", "apples"),
    ("cookie", "cookies"),
    ("cake", "cakes"),
    ("sock", "socks"),
    ("drum", "drums"),
]
FOODS = [
    ("apple", "apples"),
    ("pear", "pears"),
    ("cookie", "cookies"),
    ("cake", "cakes"),
    ("egg", "eggs"),
    ("carrot", "carrots"),
    ("plum", "plums"),
    ("bun", "buns"),
]
PLACES = [
    "the park",
    "the forest",
    "the beach",
    "the market",
    "the café",
    "the library",
    "the garden",
    "the village",
    "the old castle",
    "the river",
    "the hill",
    "the school",
    "the harbor",
    "the farm",
    "the bakery",
    "the station",
]
SPOTS = [
    "under the bed",
    "behind the door",
    "near the river",
    "in the garden",
    "on the table",
    "under a tree",
    "in a small box",
    "by the window",
    "at the bottom of the hill",
    "next to the well",
    "in the tall grass",
]
HOMES = ["a little house", "a big house", "a tiny flat", "a boat", "a tree house", "a cottage"]
PETS = ["dog", "cat", "bird", "fish", "rabbit", "turtle", "goat", "duck"]
HABITS = [
    "went for a walk",
    "read a book",
    "baked bread",
    "sang a song",
    "watered the flowers",
    "fed the ducks",
    "drew pictures",
    "played the drum",
    "cleaned the house",
    "looked at the sky",
]
FEELINGS = ["happy", "sad", "surprised", "worried", "excited", "tired", "proud", "scared"]
WEATHER = [
    "The sun was warm.",
    "It was raining.",
    "The wind was cold.",
    "It was a bright day.",
    "Snow fell softly.",
    "The sky was grey.",
    "It was a quiet night.",
]
GREETINGS = ["Hello", "Good morning", "Hi", "Bonjour", "你好", "Hey"]
ENDINGS = [
    "went home and had a cup of tea",
    "laughed and played until the sun went down",
    "shared the {food_plural} with everyone",
    "became the best of friends",
    "slept very well that night",
    "promised to meet again the next day",
]
NUMBER_WORDS = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
]


@dataclass
class Character:
    """A person (or fox, or robot) in a story, with the pronouns to refer to them."""

    name: str
    role: str
    subject: str
    object: str
    possessive: str

    @property
    def are(self) -> str:
        """The verb form after the subject pronoun: "she was" but "they were"."""
        return "were" if self.subject == "they" else "was"


def _a(word: str) -> str:
    """The indefinite article for `word` ("a box", "an apple")."""
    return ("an " if word[0] in "aeiou" else "a ") + word


def _count(rng: random.Random, singular: str, plural: str) -> str:
    """A number and a noun that agree, as words or as digits ("three cups", "14 cups")."""
    n = rng.randint(1, 20)
    number = NUMBER_WORDS[n] if n < len(NUMBER_WORDS) and rng.random() < 0.6 else str(n)
    return f"{number} {singular if n == 1 else plural}"


def _character(rng: random.Random, taken: set[str]) -> Character:
    name, (subject, obj, possessive) = rng.choice([n for n in NAMES if n[0] not in taken])
    taken.add(name)
    wrong = {"she": "boy", "he": "girl"}.get(subject)
    return Character(name, rng.choice([r for r in ROLES if r != wrong]), subject, obj, possessive)


def _say(rng: random.Random, who: Character, words: str) -> str:
    """One line of dialogue, with “curly quotes” or an em dash for variety."""
    if rng.random() < 0.8:
        return f"“{words}” said {who.name}."
    return f"{who.name} said — {words[0].lower() + words[1:]}"


def story(rng: random.Random, hero: Character | None = None, thing: str | None = None) -> str:
    """One short story: an opening, a few events with dialogue and numbers, an ending."""
    taken: set[str] = set()
    hero = hero or _character(rng, taken)
    taken.add(hero.name)
    friend = _character(rng, taken)
    singular, plural = next((o for o in OBJECTS if o[0] == thing), rng.choice(OBJECTS))
    color = rng.choice(COLORS)
    food, food_plural = rng.choice(FOODS)
    place = rng.choice(PLACES)
    feelings = rng.sample(FEELINGS, 2)
    He, he = hero.subject.capitalize(), hero.subject

    lines = [
        f"Once upon a time, there was {_a(rng.choice(ADJECTIVES))} {hero.role} named {hero.name}.",
        f"{He} lived in {rng.choice(HOMES)} with {hero.possessive} {rng.choice(PETS)}.",
        f"Every morning, {he} {rng.choice(HABITS)}.",
    ]
    events = [
        f"One day, {hero.name} found {_a(color)} {singular} {rng.choice(SPOTS)}.",
        rng.choice(WEATHER),
        f"{hero.name} went to {place} to find {hero.possessive} friend {friend.name}, "
        f"who was {_a(friend.role)}.",
        _say(rng, hero, f"{rng.choice(GREETINGS)}, {friend.name}! Look at my {color} {singular}."),
        _say(rng, friend, "It is beautiful! Where did you find it?"),
        f"{hero.name} counted {_count(rng, singular, plural)} and "
        f"{_count(rng, food, food_plural)}.",
        f"At {rng.randint(1, 12)} o'clock, they went to {rng.choice(PLACES)} together.",
        f"{friend.name} felt {feelings[0]}, but {hero.name} {hero.are} {feelings[1]}.",
        _say(rng, friend, f"Can we share the {food_plural}?"),
        f"The {food_plural} cost {rng.randint(2, 9)} coins, and {hero.name} "
        f"had {_count(rng, 'coin', 'coins')}.",
        f"The owner of the café smiled at them 🙂 and gave them {_count(rng, food, food_plural)}.",
    ]
    # Keep the events in story order, but tell only some of them.
    chosen = sorted(rng.sample(range(1, len(events)), rng.randint(3, 6)))
    lines.append(events[0])
    lines.extend(events[i] for i in chosen)
    ending = rng.choice(ENDINGS).format(food_plural=food_plural)
    lines.append(f"In the end, {hero.name} and {friend.name} {ending}.")
    lines.append(f"{hero.name} {hero.are} very {rng.choice(['happy', 'glad', 'proud'])}.")
    return " ".join(lines)


def chat(rng: random.Random) -> str:
    """A user asks for a story about a character and a thing; the assistant tells one."""
    hero = _character(rng, set())
    thing, _ = rng.choice(OBJECTS)
    request = rng.choice(
        [
            f"Tell me a story about {_a(hero.role)} named {hero.name}.",
            f"Can you tell me a story about {hero.name} and {_a(thing)}?",
            f"Write a short story about {_a(thing)}.",
        ]
    )
    return f"{USER}{request}{ASSISTANT}{story(rng, hero, thing)}"


def documents(seed: int, count: int) -> list[str]:
    """`count` documents from the generator seeded with `seed`: stories and chat turns."""
    rng = random.Random(seed)
    return [chat(rng) if rng.random() < 0.2 else story(rng) for _ in range(count)]


def train_documents(count: int = 20_000) -> list[str]:
    """The training split."""
    return documents(TRAIN_SEED, count)


def heldout_documents(count: int = 500) -> list[str]:
    """The held-out split, from a different seed than the training split."""
    return documents(HELDOUT_SEED, count)
