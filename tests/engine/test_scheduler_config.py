"""The scheduler's knobs: bad values refused with what to change; a request that never fits."""

from __future__ import annotations

import pytest

from llmserve_ref.engine.request import Request
from llmserve_ref.engine.scheduler import Scheduler
from llmserve_ref.engine.scheduler_config import SchedulerConfig


def test_a_request_larger_than_the_whole_cache_is_refused_with_what_to_change():
    s = Scheduler(SchedulerConfig(token_budget=64, max_num_seqs=4, block_size=16, num_blocks=10))
    with pytest.raises(ValueError, match=r"needs 11 KV blocks .* cache has 10; shorten"):
        s.add_request(Request("huge", prompt_len=150, max_tokens=20))
    assert not s.has_unfinished_requests()  # nothing left to block the queue
    s.add_request(Request("fits", prompt_len=150, max_tokens=10))
    assert s.waiting[0].request_id == "fits"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"token_budget": 4, "max_num_seqs": 8}, "raise token_budget"),
        ({"block_size": 0}, "block_size must be at least 1"),
        ({"watermark": 1.0}, "watermark is a fraction"),
        ({"batching": "dynamic"}, "batching is 'continuous' or 'static'"),
        ({"priority": "fair"}, "priority is 'decode' or 'prefill'"),
        ({"max_skips": -1}, "max_skips must be 0 or more"),
    ],
)
def test_bad_configs_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SchedulerConfig(**kwargs)
