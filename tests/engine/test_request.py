"""A request as the scheduler counts it: its length, and when it prefills, decodes, samples."""

from __future__ import annotations

from llmserve_ref.engine.request import Request, RequestStatus


def test_a_request_prefills_then_decodes_one_token_at_a_time():
    r = Request("a", prompt_len=5, max_tokens=3)
    assert (r.num_tokens, r.is_decoding, r.status) == (5, False, RequestStatus.WAITING)
    r.num_computed_tokens = 5  # the whole prompt in the cache: the step that got here sampled
    r.num_output_tokens = 1
    assert r.num_tokens == 6 and r.is_decoding  # the newest token is the one not yet fed back
    r.num_computed_tokens = 3  # preempted and partly recomputed: prefilling again
    assert not r.is_decoding


def test_a_request_starts_with_nothing_counted():
    r = Request("b", prompt_len=1, max_tokens=1, token_ids=[7], cache_salt="t", n=2)
    assert (r.num_computed_tokens, r.num_output_tokens, r.num_preemptions) == (0, 0, 0)
    assert r.num_cached_tokens == -1 and not r.reserved  # set when first admitted
    assert (r.token_ids, r.cache_salt, r.n) == ([7], "t", 2)
