"""Speculative decoding's settings, as vLLM's ``--speculative-config`` spells them.

A serving engine speculates when it is told how: vLLM takes one JSON object,
``--speculative-config '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}'``,
and so does ``llmserve-ref serve``, with vLLM's keys and vLLM's defaults. Off (no
config) by default. The config makes the engine's *proposer*: anything with a
``propose(token_ids)`` that returns guesses at what follows (`Proposer`); the engine
core checks them (`llmserve_ref.engine.engine_core`).

>>> config = SpeculativeConfig.from_json(
...     '{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 3}')
>>> config.prompt_lookup_min  # vLLM: the one not given takes the other's value
3
>>> config.proposer(max_model_len=256).propose([5, 6, 7, 8, 5, 6, 7])  # 5 6 7 seen before
[8, 5]

Guessing stops paying as the batch grows (a step's forward pass is no longer cheap
to widen), so, like vLLM, the number of guesses can follow the batch size:
``num_speculative_tokens_per_batch_size`` lists ``[first, last, k]`` ranges of batch
sizes, the first starting at 1; a batch size past a range keeps its k.

>>> config = SpeculativeConfig.from_dict({"method": "ngram", "num_speculative_tokens": 4,
...     "num_speculative_tokens_per_batch_size": [[1, 4, 4], [5, 16, 2], [32, 64, 0]]})
>>> [config.num_guesses(b) for b in (1, 4, 5, 20, 32, 100)]
[4, 4, 2, 2, 0, 0]

A draft model (``"method": "draft_model"``) names its model with vLLM's ``model`` key:
a model this package ships (``tiny-draft``) or a directory with a ``config.json``. Its
proposer needs the engine's KV blocks, since its keys and values are paged beside the
target's (`llmserve_ref.engine.draft_proposer`):

>>> config = SpeculativeConfig.from_json(
...     '{"method": "draft_model", "model": "tiny-draft", "num_speculative_tokens": 4}')
>>> config.draft_config().num_hidden_layers  # the draft: 2 layers (the target has 4)
2
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from llmserve_ref.engine.ngram_proposer import NgramProposer
from llmserve_ref.engine.scheduler_config import SchedulerConfig
from llmserve_ref.model.weights import MODEL_DIRS

if TYPE_CHECKING:  # torch is imported when a draft model loads: the CLI parses this first
    import torch

    from llmserve_ref.model.llama_config import ModelConfig


class Proposer(Protocol):
    """What guesses a sequence's next tokens for speculative decoding."""

    def propose(self, token_ids: Sequence[int]) -> list[int]:
        """Guesses at what follows `token_ids` (the prompt and the output so far); [] for none."""
        ...


# The methods this engine runs; vLLM has more (eagle, eagle3, medusa, mtp, suffix ...).
METHODS = ("ngram", "draft_model")


@dataclass(frozen=True)
class SpeculativeConfig:
    """vLLM's `SpeculativeConfig` keys that this engine uses, with vLLM's defaults."""

    method: str
    num_speculative_tokens: int
    model: str | None = None  # draft_model: a shipped model's name or a model directory
    prompt_lookup_min: int | None = None
    prompt_lookup_max: int | None = None
    # (first batch size, last batch size, guesses): vLLM's dynamic speculative decoding
    num_speculative_tokens_per_batch_size: tuple[tuple[int, int, int], ...] | None = None

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(
                f"speculative method {self.method!r} is not one this engine runs; "
                f"use one of: {', '.join(METHODS)}"
            )
        if self.method == "draft_model":
            self._check_draft()
        else:
            # vLLM's rule for ngram: both missing means 5 and 5; one missing takes the other's.
            low, high = self.prompt_lookup_min, self.prompt_lookup_max
            if low is None and high is None:
                low = high = 5
            object.__setattr__(self, "prompt_lookup_min", low if low is not None else high)
            object.__setattr__(self, "prompt_lookup_max", high if high is not None else low)
            if self.model is not None:
                raise ValueError("'model' names a draft model: the ngram method takes none")
            self.proposer()  # the proposer checks the numbers, and names the bad one
        if self.num_speculative_tokens_per_batch_size is not None:
            _check_schedule(self.num_speculative_tokens_per_batch_size)

    @classmethod
    def from_dict(cls, config: Mapping[str, Any]) -> SpeculativeConfig:
        """The config from vLLM's keys; an unknown or missing key is an error that says which."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(config) - known)
        if unknown:
            raise ValueError(
                f"unknown --speculative-config key(s) {', '.join(map(repr, unknown))}; "
                f"this engine takes {', '.join(sorted(known))} (vLLM's names)"
            )
        missing = [k for k in ("method", "num_speculative_tokens") if k not in config]
        if missing:
            raise ValueError(f"--speculative-config needs {' and '.join(map(repr, missing))}")
        config = dict(config)
        schedule = config.get("num_speculative_tokens_per_batch_size")
        if schedule is not None:
            if not isinstance(schedule, list) or not all(
                isinstance(e, list | tuple) and len(e) == 3 and all(type(n) is int for n in e)
                for e in schedule
            ):
                raise ValueError(
                    "num_speculative_tokens_per_batch_size must be a list of "
                    f"[first batch size, last batch size, guesses] integers, not {schedule!r}"
                )
            config["num_speculative_tokens_per_batch_size"] = tuple(map(tuple, schedule))
        if not isinstance(config.get("model", ""), str):
            raise ValueError(
                f"--speculative-config 'model' must be a string, not {config['model']!r}"
            )
        for key, value in config.items():
            if key not in ("method", "model", "num_speculative_tokens_per_batch_size") and (
                value is not None and type(value) is not int
            ):
                raise ValueError(f"--speculative-config {key!r} must be an integer, not {value!r}")
        return cls(**config)

    @classmethod
    def from_json(cls, text: str) -> SpeculativeConfig:
        """The config from ``--speculative-config``'s JSON object."""
        try:
            config = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"--speculative-config is not valid JSON: {error}") from None
        if not isinstance(config, dict):
            raise ValueError(f"--speculative-config must be a JSON object, not {text!r}")
        return cls.from_dict(config)

    def num_guesses(self, batch_size: int) -> int:
        """How many guesses a sequence checks in a step of `batch_size` sequences: the k of
        the last range starting at or below it, at most ``num_speculative_tokens``."""
        k = self.num_speculative_tokens
        for first, _, guesses in sorted(self.num_speculative_tokens_per_batch_size or ()):
            if first <= batch_size:
                k = min(guesses, self.num_speculative_tokens)
        return k

    def _check_draft(self) -> None:
        if self.model is None:
            raise ValueError(
                "the draft_model method needs 'model': tiny-draft, or a model directory"
            )
        if self.prompt_lookup_min is not None or self.prompt_lookup_max is not None:
            raise ValueError("prompt_lookup_min and prompt_lookup_max are for the ngram method")
        if self.num_speculative_tokens < 1:
            raise ValueError(
                f"num_speculative_tokens must be at least 1, not {self.num_speculative_tokens}"
            )
        if not (self.draft_dir() / "config.json").is_file():
            raise ValueError(
                f"draft model {self.model!r} is neither a model this package ships "
                f"({', '.join(MODEL_DIRS)}) nor a directory with a config.json"
            )

    def draft_dir(self) -> Path:
        """The draft model's directory."""
        assert self.model is not None
        return MODEL_DIRS.get(self.model, Path(self.model))

    def draft_config(self) -> ModelConfig | None:
        """The draft model's architecture (its KV takes memory beside the target's); None
        for a method without a model."""
        from llmserve_ref.model.llama_config import ModelConfig

        if self.method != "draft_model":
            return None
        return ModelConfig.from_hf_dict(json.loads((self.draft_dir() / "config.json").read_text()))

    def proposer(
        self,
        max_model_len: int | None = None,
        scheduler: SchedulerConfig | None = None,
        device: torch.device | str = "cpu",
    ) -> Proposer:
        """The proposer this config describes, for sequences of at most `max_model_len`; a
        draft model is loaded on `device`, its KV in the `scheduler`'s blocks."""
        if self.method == "draft_model":
            from llmserve_ref.engine.draft_proposer import DraftProposer
            from llmserve_ref.model.llama import Llama

            if scheduler is None:
                raise ValueError("a draft model's KV is paged: give the engine's SchedulerConfig")
            return DraftProposer(
                Llama.from_pretrained(self.draft_dir(), device),
                scheduler.num_blocks,
                scheduler.block_size,
                self.num_speculative_tokens,
            )
        assert self.prompt_lookup_min is not None and self.prompt_lookup_max is not None
        return NgramProposer(
            self.prompt_lookup_min,
            self.prompt_lookup_max,
            self.num_speculative_tokens,
            max_model_len,
        )


def _check_schedule(schedule: tuple[tuple[int, int, int], ...]) -> None:
    """vLLM's rules: positive ranges in order, not overlapping, the first starting at 1,
    no negative k (0 turns speculation off at those batch sizes)."""
    end = 0
    for first, last, guesses in sorted(schedule):
        if not 0 < first <= last or guesses < 0:
            raise ValueError(
                f"num_speculative_tokens_per_batch_size entry {[first, last, guesses]}: "
                "want 0 < first batch size <= last batch size and guesses >= 0"
            )
        if first <= end:
            raise ValueError("num_speculative_tokens_per_batch_size ranges overlap")
        end = last
    if not schedule or min(schedule)[0] != 1:
        raise ValueError("num_speculative_tokens_per_batch_size must start at batch size 1")
