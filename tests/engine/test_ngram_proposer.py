"""Prompt lookup (vLLM's ``ngram``): the longest n-gram in range, its earliest occurrence,
what followed it, capped three ways. vLLM's own proposer is the oracle in `nox -s engines`
(tests/peers/test_ngram_vs_vllm.py); here, cases a reader can check by eye, and the rule
itself, written out as plain loops, on random token lists."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmserve_ref.engine.ngram_proposer import NgramProposer


def lookup(lo: int, hi: int, k: int, max_model_len: int | None = None) -> NgramProposer:
    return NgramProposer(lo, hi, k, max_model_len)


def test_the_longest_ngram_wins_over_an_earlier_shorter_one():
    # "3" alone first occurs at index 0 (then 9 would follow); "2 3" occurs at 4 (then 7).
    assert lookup(1, 2, 1).propose([3, 9, 0, 0, 2, 3, 7, 2, 3]) == [7]
    # With n-grams of one token only, the earliest 3 decides.
    assert lookup(1, 1, 1).propose([3, 9, 0, 0, 2, 3, 7, 2, 3]) == [9]


def test_of_equal_length_the_earliest_occurrence_wins():
    assert lookup(2, 2, 1).propose([1, 2, 5, 1, 2, 6, 1, 2]) == [5]


def test_an_overlapping_occurrence_continues_a_repeating_pattern():
    assert lookup(1, 3, 4).propose([4, 5, 4, 5, 4]) == [5, 4]  # "4 5 4" at 0: then 5, 4


def test_the_guess_is_capped_by_k_by_the_text_and_by_the_context():
    story = [1, 2, 3, 4, 5, 6, 1, 2]
    assert lookup(2, 2, 3).propose(story) == [3, 4, 5]  # k
    assert lookup(2, 2, 9).propose(story) == [3, 4, 5, 6, 1, 2]  # the text after the match
    assert lookup(2, 2, 9, max_model_len=10).propose(story) == [3, 4]  # room for 2 more
    assert lookup(2, 2, 9, max_model_len=8).propose(story) == []  # the context is full


def test_no_guess_below_prompt_lookup_min():
    assert lookup(2, 3, 4).propose([7, 8, 9, 7]) == []  # only "7" repeats
    assert lookup(1, 3, 4).propose([7, 8, 9, 7]) == [8, 9, 7]
    assert lookup(1, 1, 1).propose([]) == [] and lookup(1, 1, 1).propose([7]) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0, 2, 4), "prompt_lookup_min must be at least 1, not 0"),
        ((3, 2, 4), r"prompt_lookup_max \(2\) must be at least prompt_lookup_min \(3\)"),
        ((1, 2, 0), "num_speculative_tokens must be at least 1, not 0"),
    ],
)
def test_a_bad_setting_is_refused_by_its_name(args, message):
    with pytest.raises(ValueError, match=message):
        NgramProposer(*args)


def rule(tokens: list[int], lo: int, hi: int, k: int, max_model_len: int) -> list[int]:
    """The rule as the docstring states it, one n and one start at a time."""
    room = min(k, max_model_len - len(tokens))
    for n in range(hi, lo - 1, -1):
        if room <= 0 or n >= len(tokens):
            continue
        for start in range(len(tokens) - n):  # occurrences that end before the last token
            if tokens[start : start + n] == tokens[-n:]:
                return tokens[start + n : start + n + room]
    return []


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    tokens=st.lists(st.integers(0, 3), max_size=40),
    lo=st.integers(1, 4),
    extra=st.integers(0, 3),
    k=st.integers(1, 6),
    spare=st.integers(-2, 8),
)
def test_the_proposal_follows_the_rule_on_random_token_lists(tokens, lo, extra, k, spare):
    max_model_len = max(1, len(tokens) + spare)
    got = lookup(lo, lo + extra, k, max_model_len).propose(tokens)
    assert got == rule(tokens, lo, lo + extra, k, max_model_len)
