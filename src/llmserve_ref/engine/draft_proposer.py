"""A draft model as proposer: a small model guesses each sequence's next tokens, on paged KV.

Prompt lookup (`llmserve_ref.engine.ngram_proposer`) guesses only where the text
repeats itself. A draft model (vLLM's ``"method": "draft_model"``) guesses everywhere,
at the price of running a second, smaller model every step, and of keeping its keys
and values for every token the target has seen. They live beside the target's: a
`KVStorage` of the draft's own, read and written through the **same block tables**, so
whatever the block manager does to a table holds for both caches at once: a prefix-cache
hit hands over the draft's KV with the target's, a fork's copy-on-write copies both, a
rollback frees both (vLLM's draft layers sit in the target's KV cache groups too, and
read the same block tables).

The guesses fill slots the scheduler already sized: before scheduling, a speculating
sequence asks for k guesses (`propose` returns k placeholders), the scheduler gives the
step its blocks and trims the guesses to its budget, and then `draft` runs, before the
target's forward pass:

1. one forward pass of the draft over every scheduled token it has not seen: prompt
   chunks and plain decodes of this step and, for each speculating sequence, its newest
   token, whose logits give the first guess;
2. one pass per guess, of one token per sequence: it writes the guess's keys and values
   and, but for the last guess, its logits give the next one.

So the draft writes every position the target computes, a guess's as soon as it is made:
whatever the target accepts, the draft's KV already holds, and every block that enters
the prefix cache holds the draft's KV too.

Each guess is the draft's most likely token: a guess made with certainty, whose check
(`EngineCore.sample_tokens`) keeps the target's distribution for sampled requests too, as
vLLM 0.32's default ``draft_sample_method``, ``"greedy"``, does.

>>> from llmserve_ref.model.weights import load_draft
>>> drafter = DraftProposer(load_draft("cpu")[0], num_blocks=8, block_size=16,
...                         num_speculative_tokens=3)
>>> drafter.propose([0, 5, 6])  # three slots, filled once the step's blocks are known
[-1, -1, -1]
"""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence

from llmserve_ref.engine.model_runner import ModelRunner
from llmserve_ref.engine.paged_batch import Chunk
from llmserve_ref.engine.scheduler_config import SchedulerConfig
from llmserve_ref.engine.scheduler_output import SchedulerOutput
from llmserve_ref.model.llama import Llama

UNDRAFTED = -1  # a guess's slot before the draft fills it (no token has this id)


class DraftProposer:
    """The draft model, its paged KV, and how far each sequence's draft KV is written."""

    def __init__(
        self, model: Llama, num_blocks: int, block_size: int, num_speculative_tokens: int
    ) -> None:
        if num_speculative_tokens < 1:
            raise ValueError(
                f"num_speculative_tokens must be at least 1, not {num_speculative_tokens}"
            )
        self.runner = ModelRunner(model, num_blocks, block_size)
        self.num_speculative_tokens = num_speculative_tokens
        self.num_forwards, self.seconds = 0, 0.0  # the draft's passes and time: its cost
        # Per sequence, the positions whose draft KV is written (a prefix of its tokens).
        self.computed: dict[str, int] = {}

    def fit(self, target: Llama, config: SchedulerConfig) -> int:
        """The bytes the draft's KV adds to each of the engine's blocks; an error if this
        draft cannot guess for `target` (another vocabulary) in `config`'s blocks."""
        draft, storage = self.runner.model, self.runner.storage
        if draft.config.vocab_size != target.config.vocab_size:
            raise ValueError(
                f"the draft model's vocabulary ({draft.config.vocab_size} tokens) is not the "
                f"target's ({target.config.vocab_size}): a draft must share its tokenizer"
            )
        if (storage.num_blocks, storage.block_size) != (config.num_blocks, config.block_size):
            raise ValueError("the draft's KV must have the target's blocks: same number, size")
        return config.block_size * draft.config.kv_bytes_per_token(draft.dtype)

    def propose(self, token_ids: Sequence[int]) -> list[int]:
        """Room for k guesses: slots that `draft` fills once the step is scheduled."""
        return [UNDRAFTED] * self.num_speculative_tokens

    def draft(self, out: SchedulerOutput, running: Collection[str]) -> None:
        """Fill this step's guesses in `out`, and give the draft KV of every token it runs.

        `running` names the sequences still running (the others' counts are dropped).
        """
        start = time.perf_counter()
        self._draft(out, running)
        self.seconds += time.perf_counter() - start

    # --8<-- [start:draft]
    def _draft(self, out: SchedulerOutput, running: Collection[str]) -> None:
        """Steps 1 and 2 of the module's docstring; `out` schedules at least one sequence."""
        self.computed = {i: n for i, n in self.computed.items() if i in running}
        spec = out.scheduled_spec_decode_tokens
        chunks, guessing, ends = [], [], []
        for request_id, n in out.num_scheduled_tokens.items():
            request = out.scheduled[request_id]
            assert request.token_ids is not None, "a draft model needs the token ids"
            start, guesses = request.num_computed_tokens, spec.get(request_id, [])
            end = start + n - len(guesses)  # the target's tokens of this step, guesses aside
            # New, back from a preemption with less cached, or past rejected guesses: the
            # target's count is ours.
            seen = min(self.computed.get(request_id, start), start)
            unseen = request.token_ids[seen:end]
            chunks.append(Chunk(unseen, seen, out.block_table(request_id), bool(guesses)))
            if guesses:
                guessing.append(request)
                ends.append(end)
            self.computed[request_id] = end
        # 1: everything unseen; the speculating sequences' logits give their first guesses.
        tokens = self._argmax(chunks, out.blocks_to_copy)
        for j in range(self.num_speculative_tokens):
            feeding, fed = [], []
            for request, end, token in zip(guessing, ends, tokens, strict=True):
                guesses = spec[request.request_id]
                guesses[j] = token
                more = j + 1 < len(guesses)  # 2: every guess goes in; not the last: for the next
                table = out.block_table(request.request_id)
                feeding.append(Chunk([token], end + j, table, samples=more))
                self.computed[request.request_id] = end + j + 1
                if more:
                    fed.append((request, end))
            if not feeding:
                return
            guessing, ends = [r for r, _ in fed], [e for _, e in fed]
            tokens = self._argmax(feeding)  # (no rows for the sequences that are done)

    # --8<-- [end:draft]

    def _argmax(
        self, chunks: Sequence[Chunk], blocks_to_copy: Sequence[tuple[int, int]] = ()
    ) -> list[int]:
        self.num_forwards += 1
        logits = self.runner.forward(chunks, blocks_to_copy)
        return logits.argmax(dim=-1).tolist() if len(logits) else []
