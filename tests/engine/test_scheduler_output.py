"""One step's plan: its sums follow what is added and removed, guesses included."""

from __future__ import annotations

from llmserve_ref.engine.request import Request
from llmserve_ref.engine.scheduler_output import SchedulerOutput, pairs


def test_pairs_count_causal_query_key_pairs():
    assert pairs(1, 99) == 100  # a decode token attends to 99 cached tokens and itself
    assert pairs(3, 2) == 3 * 2 + 6  # each new token: the cached ones, then 1, 2, 3 new ones


def test_a_preempted_request_leaves_the_plan_with_its_tokens_pairs_and_guesses():
    out = SchedulerOutput()
    a = Request("a", prompt_len=8, max_tokens=4)
    b = Request("b", prompt_len=5, max_tokens=8, num_computed_tokens=6, num_output_tokens=2)
    out.add(a, 8)
    out.add(b, 3)  # its newest token and two guesses
    out.scheduled_spec_decode_tokens["b"] = [5, 6]
    assert (out.total_num_scheduled_tokens, out.kv_tokens_read) == (11, 6)
    assert out.attention_pairs == pairs(8, 0) + pairs(3, 6)
    out.remove(b)
    assert out.num_scheduled_tokens == {"a": 8} and out.scheduled_spec_decode_tokens == {}
    assert (out.total_num_scheduled_tokens, out.kv_tokens_read, out.attention_pairs) == (8, 0, 36)
    out.remove(b)  # not in the plan any more: nothing changes
    assert out.total_num_scheduled_tokens == 8
