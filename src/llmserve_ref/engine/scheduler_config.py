"""The knobs of one engine instance: what the scheduler may run in a step, and how.

The token budget (vLLM's ``max_num_batched_tokens``) and ``max_num_seqs`` bound a step;
the KV pool is ``num_blocks`` blocks of ``block_size`` tokens; the rest choose a policy
(continuous or static batching, decode or prefill first, a watermark, how far later
requests may skip ahead, how memory is reserved). The same settings drive the real
engine and the simulator.

>>> config = SchedulerConfig(token_budget=512, max_num_seqs=64, num_blocks=1000)
>>> config.watermark_blocks
10
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from llmserve_ref.engine.kv_block import blocks_for


# --8<-- [start:config]
@dataclass(frozen=True)
class SchedulerConfig:
    """The knobs of one engine instance.

    `batching`: "continuous" admits a request whenever a slot and its blocks are
    free; "static" forms a batch only when the running set is empty and lets it
    run until its longest member finishes, reserving every member's blocks for
    its whole length (`prompt_len + max_tokens`) up front, as engines with
    fixed-shape batches did.

    `priority`: "decode" gives every running decode its token before any prompt
    chunk (stall-free batching, Sarathi-Serve; vLLM's default); "prefill" serves
    prompt chunks and new requests first and gives decodes what is left.

    `watermark`: the fraction of blocks that must stay free after a continuous
    admission (vLLM v0 used 0.01), room for running requests to grow into.

    `max_skips`: 0 is strict first-come-first-served: a waiting request whose
    blocks do not fit stops admission behind it. With k > 0, later requests may
    be admitted ahead of it, but only k times; then it blocks until it fits.

    `reservation` (the simulator's, to compare with the engines PagedAttention
    replaced; the real engine is paged): "paged" takes blocks as a sequence grows;
    "max_tokens" holds `prompt_len + max_tokens` from admission on, "context" holds
    `max_model_len` tokens, each as one contiguous region
    (`llmserve_ref.planning.fragmentation.ContiguousAllocator`).
    """

    token_budget: int = 2048
    max_num_seqs: int = 256
    block_size: int = 16
    num_blocks: int = 4096
    batching: Literal["continuous", "static"] = "continuous"
    priority: Literal["decode", "prefill"] = "decode"
    watermark: float = 0.01
    max_skips: int = 0
    enable_prefix_caching: bool = True
    reservation: Literal["paged", "max_tokens", "context"] = "paged"
    max_model_len: int | None = None  # what a "context" reservation holds per request

    def __post_init__(self) -> None:
        for name in ("token_budget", "max_num_seqs", "block_size", "num_blocks"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.token_budget < self.max_num_seqs:
            raise ValueError(
                f"token_budget {self.token_budget} < max_num_seqs {self.max_num_seqs}: a step "
                "could not give every running request its decode token; raise token_budget"
            )
        if self.batching not in ("continuous", "static"):
            raise ValueError(f"batching is 'continuous' or 'static', got {self.batching!r}")
        if self.priority not in ("decode", "prefill"):
            raise ValueError(f"priority is 'decode' or 'prefill', got {self.priority!r}")
        if not 0 <= self.watermark < 1:
            raise ValueError(f"watermark is a fraction in [0, 1), got {self.watermark}")
        if self.max_skips < 0:
            raise ValueError(f"max_skips must be 0 or more, got {self.max_skips}")
        if self.reservation not in ("paged", "max_tokens", "context"):
            raise ValueError(f"reservation is paged, max_tokens or context: {self.reservation!r}")
        if self.reservation == "context" and not 0 < (self.max_model_len or 0) <= (
            self.num_blocks * self.block_size
        ):
            raise ValueError(
                f"a 'context' reservation needs max_model_len between 1 and the cache's "
                f"{self.num_blocks * self.block_size} tokens, got {self.max_model_len}"
            )

    @property
    def watermark_blocks(self) -> int:
        return int(self.watermark * self.num_blocks)

    def check_fits(self, request_id: str, prompt_len: int, max_tokens: int) -> None:
        """Refuse a request whose whole sequence needs more blocks than the pool has: it
        would wait forever at the head of the queue and block everyone behind it."""
        needed = blocks_for(prompt_len + max_tokens, self.block_size)
        if needed > self.num_blocks:
            raise ValueError(
                f"request {request_id!r} needs {needed} KV blocks for "
                f"{prompt_len} prompt + {max_tokens} max_tokens at block_size "
                f"{self.block_size}, but the whole cache has {self.num_blocks}; "
                "shorten the prompt or max_tokens, or give the cache more blocks"
            )
        limit = self.max_model_len  # set whenever the reservation is "context"
        if self.reservation == "context" and limit and prompt_len + max_tokens > limit:
            raise ValueError(
                f"request {request_id!r}: {prompt_len} prompt + {max_tokens} max_tokens is "
                f"past max_model_len {self.max_model_len}"
            )


# --8<-- [end:config]
