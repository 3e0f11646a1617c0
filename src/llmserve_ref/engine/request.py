"""A request as the scheduler sees it: counted in tokens, with where it stands.

The scheduler (`llmserve_ref.engine.scheduler`) never sees text or tensors: a request
is a prompt length, a token limit, how many of its tokens are computed (their keys and
values are in the cache), how many it has generated, and its status. The simulator's
requests and the engine's are the same objects; the engine's also carry token ids.

>>> r = Request("a", prompt_len=10, max_tokens=3)
>>> r.num_tokens, r.is_decoding, r.status
(10, False, <RequestStatus.WAITING: 'waiting'>)
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


# --8<-- [start:request]
@dataclass(eq=False, slots=True)
class Request:
    """One request, counted in tokens.

    `num_computed_tokens` is how many of its tokens (prompt, then outputs) have
    their keys and values in the cache. While it is below `num_tokens - 1` the
    request is prefilling; at `num_tokens - 1` it is decoding (the newest output
    token is the only one not yet fed back). The step that brings it level with
    `num_tokens` samples a new token.

    A real engine passes `token_ids` (the prompt; sampled tokens are appended),
    which lets the prefix cache share blocks, salted per tenant by `cache_salt`,
    and may set `spec_token_ids`, guesses at its next tokens (speculative
    decoding), which a decode step then checks beside its newest token.
    A simulated request has no token ids and shares nothing. `n` is the number
    of sequences it becomes once its prompt is computed (OpenAI's ``n``): they
    share the prompt's blocks, and each takes a seat from admission on.
    """

    request_id: str
    prompt_len: int
    max_tokens: int
    token_ids: list[int] | None = None
    cache_salt: str | None = None
    n: int = 1
    num_computed_tokens: int = 0
    num_output_tokens: int = 0
    status: RequestStatus = RequestStatus.WAITING
    num_preemptions: int = 0
    num_cached_tokens: int = -1  # prompt tokens found cached when first admitted (vLLM's name)
    num_skips: int = 0  # times a later request was admitted ahead of it
    reserved: bool = False  # a static batch's member: blocks held for its whole length
    spec_token_ids: list[int] = field(default_factory=list)  # guesses for the next decode step

    @property
    def num_tokens(self) -> int:
        return self.prompt_len + self.num_output_tokens

    @property
    def is_decoding(self) -> bool:
        return self.num_output_tokens > 0 and self.num_computed_tokens == self.num_tokens - 1


# --8<-- [end:request]
