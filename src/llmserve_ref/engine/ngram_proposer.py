"""Prompt lookup: guess the next tokens by finding the text's last words earlier in the text.

Speculative decoding needs guesses that are cheap and often right. When the output
repeats its input (a summary quoting its source, code being edited, a story retold),
the best guess needs no model at all: find the last few tokens earlier in the prompt
or output, and propose what followed them there. This is vLLM's ``ngram`` method
(``--speculative-config '{"method": "ngram", ...}'``), with its names and its rule:

* among n-gram lengths from ``prompt_lookup_max`` down to ``prompt_lookup_min``, the
  longest whose last n tokens occur earlier wins (a longer match is better evidence);
* of that length, the **earliest** occurrence (vLLM 0.32's ``NgramProposer``);
* the guess is what follows it: at most ``num_speculative_tokens`` tokens, fewer when the
  text ends sooner after the match or the context (``max_model_len``) has no room.

An occurrence may overlap the end (in ``a b a b a`` the last ``a b a`` occurs at the
start), which is how a repeating pattern is continued. When nothing recurs, the guess is
an empty list, and the sequence decodes one token as usual.

>>> lookup = NgramProposer(prompt_lookup_min=1, prompt_lookup_max=3, num_speculative_tokens=2)
>>> lookup.propose([5, 6, 7, 8, 9, 5, 6, 7])  # 5 6 7 seen at the start: 8 9 followed it
[8, 9]
>>> lookup.propose([1, 2, 3])  # nothing repeats
[]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class NgramProposer:
    """vLLM's n-gram proposer: its three keys of ``--speculative-config``, and the context."""

    prompt_lookup_min: int
    prompt_lookup_max: int
    num_speculative_tokens: int
    max_model_len: int | None = None  # no cap on the guess from the context when None

    def __post_init__(self) -> None:
        if self.prompt_lookup_min < 1:
            raise ValueError(f"prompt_lookup_min must be at least 1, not {self.prompt_lookup_min}")
        if self.prompt_lookup_max < self.prompt_lookup_min:
            raise ValueError(
                f"prompt_lookup_max ({self.prompt_lookup_max}) must be at least "
                f"prompt_lookup_min ({self.prompt_lookup_min})"
            )
        if self.num_speculative_tokens < 1:
            raise ValueError(
                f"num_speculative_tokens must be at least 1, not {self.num_speculative_tokens}"
            )

    def propose(self, token_ids: Sequence[int]) -> list[int]:
        """The guessed continuation of `token_ids` (prompt and output so far); [] if none.

        Every earlier occurrence of the last token is where a match can end: from each, in
        order, count how far back the tokens agree with the text's end (at most
        ``prompt_lookup_max``). The first occurrence with the longest reach wins. The
        list's own `index` finds the occurrences, with no array to build per call: the
        engine asks once per decoding sequence per step.
        """
        tokens, size = list(token_ids), len(token_ids)
        room = self.num_speculative_tokens
        if self.max_model_len is not None:
            room = min(room, self.max_model_len - size)
        if room <= 0 or size < 2:
            return []
        last, longest = tokens[-1], min(self.prompt_lookup_max, size - 1)
        best, follows = 0, 0  # the longest match so far, and where what followed it starts
        end = tokens.index(last)  # an occurrence of the last token, before the last itself
        while end < size - 1:
            n = 1  # tokens[end - n + 1 : end + 1] == tokens[-n:]
            while n < longest and n <= end and tokens[end - n] == tokens[-1 - n]:
                n += 1
            if n > best:  # strictly longer: of equal matches the earliest stays
                best, follows = n, end + 1
                if n == longest:
                    break  # no later occurrence can beat it
            end = tokens.index(last, end + 1)
        if best < self.prompt_lookup_min:
            return []
        return tokens[follows : follows + room]
