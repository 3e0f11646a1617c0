"""From token ids to text a client may see, one token at a time.

A server streams text while it decodes, and two things make "decode the new
token and send it" wrong:

* **Split characters.** A byte-level BPE token is a run of *bytes*, not of
  characters. ``é`` is two bytes in UTF-8 and ``🙂`` four, and the tokenizer may
  put them in different tokens. Decoding a token on its own then gives ``�``
  (U+FFFD), and a client that receives it cannot take it back. The fix is an
  incremental UTF-8 decoder: feed it each token's bytes; it returns only whole
  characters and keeps an unfinished one until its last byte arrives.
* **Stop strings.** ``stop=["The end"]`` must end the output *before* the stop
  string, which may arrive over several tokens (``The``, `` e``, ``nd``). Text
  that could be the start of a stop string is held back until it is clear
  whether it is one.

`Detokenizer` does the first, `StopStrings` the second; `TextStream` chains
them, and is what the engine keeps per sequence.

>>> from llmserve_ref.model.weights import TARGET_DIR
>>> from llmserve_ref.model.tokenizer import Tokenizer
>>> tok = Tokenizer.from_file(TARGET_DIR)
>>> pieces = token_bytes(tok)
>>> pieces[tok.encode("é")[0]]
b'\\xc3\\xa9'
>>> split = [tok.backend.token_to_id("Ã"), tok.backend.token_to_id("©")]  # é's 2 bytes
>>> tok.decode(split[:1])
'�'
>>> d = Detokenizer(tok)
>>> [d.step(i) for i in [tok.bos_id, *split]]
['', '', 'é']
>>> ids = tok.encode("a cat sat on a mat")
>>> [tok.decode([i]) for i in ids]
['a', ' cat', ' s', 'at', ' on', ' a', ' m', 'at']
>>> stream = TextStream(tok, stop=["sat"])
>>> [stream.step(i) for i in ids], stream.stopped
(['a', ' cat', ' ', '', '', '', '', ''], True)
"""

from __future__ import annotations

import codecs
import weakref
from collections.abc import Iterable

from llmserve_ref.model.tokenizer import Tokenizer


def _byte_alphabet() -> dict[str, int]:
    """GPT-2's map from the 256 printable stand-in characters back to the bytes they encode.

    Byte-level BPE writes every byte as a visible character (a space is ``Ġ``,
    byte 0xC3 is ``Ã``) so the vocabulary is printable; this undoes it.
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    stand_ins = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            stand_ins.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, stand_ins, strict=True)}


_PIECES: weakref.WeakKeyDictionary[Tokenizer, tuple[bytes, ...]] = weakref.WeakKeyDictionary()


def token_bytes(tokenizer: Tokenizer) -> tuple[bytes, ...]:
    """The raw bytes of every token id; a special token is its own text in UTF-8.

    Read from the whole vocabulary once per tokenizer, then shared (hence a tuple): the
    server makes a `Detokenizer` for every request it admits.
    """
    pieces = _PIECES.get(tokenizer)
    if pieces is None:
        alphabet = _byte_alphabet()
        special = {t.content for t in tokenizer.backend.get_added_tokens_decoder().values()}
        read = [b""] * tokenizer.vocab_size
        for token, i in tokenizer.backend.get_vocab().items():
            read[i] = token.encode() if token in special else bytes(alphabet[c] for c in token)
        pieces = _PIECES[tokenizer] = tuple(read)
    return pieces


# --8<-- [start:detokenizer]
class Detokenizer:
    """Token ids in, whole characters out: a split UTF-8 character waits for its last byte."""

    def __init__(self, tokenizer: Tokenizer, skip_special_tokens: bool = True) -> None:
        self.pieces = token_bytes(tokenizer)
        special = tokenizer.backend.get_added_tokens_decoder()
        self.skipped = set(special) if skip_special_tokens else set()
        self.utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def step(self, token_id: int) -> str:
        """The characters that `token_id` completes ('' while a character is unfinished)."""
        if token_id in self.skipped:
            return ""
        return self.utf8.decode(self.pieces[token_id])

    def flush(self) -> str:
        """At the end: bytes of a character that never finished become one ``�``."""
        return self.utf8.decode(b"", final=True)


# --8<-- [end:detokenizer]


# --8<-- [start:stop_strings]
class StopStrings:
    """Hold back text that may begin a stop string; cut the output where the first one starts.

    "First" is by where it starts in the whole text, so the result does not depend on how
    the text arrives in pieces: when one stop string is complete but another, which began
    earlier, may still complete, the text waits for the earlier one to finish or fail.
    """

    def __init__(self, stop: Iterable[str] = ()) -> None:
        self.stop = [s for s in stop if s]
        self.pending = ""
        self.stopped = False

    def feed(self, text: str) -> str:
        """Text that is safe to send now. After a stop string, always ''."""
        if self.stopped:
            return ""
        self.pending += text
        cut, start = self._first_complete(), self._first_open()
        if cut is not None and (start is None or start > cut):
            return self._stop_at(cut)
        hold = min(i for i in (cut, start, len(self.pending)) if i is not None)
        out, self.pending = self.pending[:hold], self.pending[hold:]
        return out

    def _first_complete(self) -> int | None:
        """Where the earliest complete stop string in `pending` starts."""
        found = [i for i in (self.pending.find(s) for s in self.stop) if i >= 0]
        return min(found, default=None)

    def _first_open(self) -> int | None:
        """Where the earliest end of `pending` that could still grow into a stop string starts."""
        longest = max((len(s) for s in self.stop), default=0)
        for i in range(max(0, len(self.pending) - longest + 1), len(self.pending)):
            tail = self.pending[i:]
            if any(len(s) > len(tail) and s.startswith(tail) for s in self.stop):
                return i
        return None

    def _stop_at(self, cut: int) -> str:
        self.stopped = True
        out, self.pending = self.pending[:cut], ""
        return out

    def flush(self) -> str:
        """At the end: what was held back, up to a stop string if one is complete."""
        if self.stopped:
            return ""
        cut = self._first_complete()
        if cut is not None:
            return self._stop_at(cut)
        out, self.pending = self.pending, ""
        return out


# --8<-- [end:stop_strings]


class TextStream:
    """Per-sequence text state: token ids in, text to send out, and whether a stop string hit."""

    def __init__(self, tokenizer: Tokenizer, stop: Iterable[str] = ()) -> None:
        self.detokenizer = Detokenizer(tokenizer)
        self.stops = StopStrings(stop)

    @property
    def stopped(self) -> bool:
        return self.stops.stopped

    def step(self, token_id: int) -> str:
        return self.stops.feed(self.detokenizer.step(token_id))

    def flush(self) -> str:
        return self.stops.feed(self.detokenizer.flush()) + self.stops.flush()
