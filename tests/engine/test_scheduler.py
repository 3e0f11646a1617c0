"""The scheduler: its policies one by one, its failure modes, and invariants on random workloads."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmserve_ref.engine.block_invariants import check_blocks
from llmserve_ref.engine.kv_block import blocks_for
from llmserve_ref.engine.request import Request, RequestStatus
from llmserve_ref.engine.scheduler import Scheduler
from llmserve_ref.engine.scheduler_config import SchedulerConfig
from llmserve_ref.engine.scheduler_output import SchedulerOutput, SchedulerStats


@dataclass
class Run:
    """A scheduler driven to completion, with every step's output kept."""

    scheduler: Scheduler
    outputs: list[SchedulerOutput] = field(default_factory=list)
    admitted_at: dict[str, int] = field(default_factory=dict)  # first admission step


def drive(config: SchedulerConfig, requests, arrivals=None, max_steps: int = 100_000) -> Run:
    """Add each request at its arrival step (default 0) and step until all finish."""
    arrivals = arrivals or [0] * len(requests)
    pending = sorted(zip(arrivals, range(len(requests)), requests, strict=True))
    run = Run(Scheduler(config))
    s = run.scheduler
    step = 0
    while pending or s.has_unfinished_requests():
        assert step < max_steps, "did not finish"
        while pending and pending[0][0] <= step:
            s.add_request(pending.pop(0)[2])
        out = s.schedule()
        for r in s.running:
            run.admitted_at.setdefault(r.request_id, step)
        s.update_from_output(out)
        run.outputs.append(out)
        step += 1
    return run


def steps_of(run: Run, request_id: str) -> list[int]:
    return [run.outputs[i].num_scheduled_tokens.get(request_id, 0) for i in range(len(run.outputs))]


# Policies


def test_a_long_prompt_is_split_into_chunks_under_the_budget():
    config = SchedulerConfig(token_budget=16, max_num_seqs=4, block_size=4, num_blocks=64)
    request = Request("r", prompt_len=40, max_tokens=3)
    run = drive(config, [request])
    assert steps_of(run, "r") == [16, 16, 8, 1, 1]
    assert request.num_output_tokens == 3 and request.status is RequestStatus.FINISHED


def two_decoders_and_a_long_prompt(priority: str) -> list[SchedulerOutput]:
    config = SchedulerConfig(
        token_budget=8, max_num_seqs=4, block_size=4, num_blocks=64, priority=priority
    )
    s = Scheduler(config)
    for name in ("a", "b"):
        s.add_request(Request(name, prompt_len=3, max_tokens=10))
    s.update_from_output(s.schedule())  # a and b prefill and sample a first token
    s.add_request(Request("long", prompt_len=40, max_tokens=2))
    outputs = []
    for _ in range(3):
        outputs.append(s.schedule())
        s.update_from_output(outputs[-1])
    return outputs


def test_decode_priority_never_stalls_running_decodes():
    for out in two_decoders_and_a_long_prompt("decode"):
        assert out.num_scheduled_tokens == {"a": 1, "b": 1, "long": 6}


def test_prefill_priority_stalls_decodes_while_a_prompt_takes_the_budget():
    for out in two_decoders_and_a_long_prompt("prefill"):
        assert out.num_scheduled_tokens == {"long": 8}


def test_max_num_seqs_caps_the_running_set():
    config = SchedulerConfig(token_budget=64, max_num_seqs=2, block_size=4, num_blocks=64)
    s = Scheduler(config)
    for i in range(5):
        s.add_request(Request(str(i), prompt_len=4, max_tokens=4))
    out = s.schedule()
    assert list(out.num_scheduled_tokens) == ["0", "1"] and len(s.waiting) == 3


def test_static_batching_admits_nothing_until_the_whole_batch_is_done():
    config = SchedulerConfig(
        token_budget=64, max_num_seqs=2, block_size=4, num_blocks=64, batching="static"
    )
    requests = [Request("short", 4, 2), Request("long", 4, 10), Request("next", 4, 2)]
    run = drive(config, requests)
    # "short" finishes after step 1, but "next" only starts when "long" has finished.
    assert run.admitted_at == {"short": 0, "long": 0, "next": 10}
    assert requests[1].num_output_tokens == 10


def test_static_batching_reserves_each_members_whole_length():
    config = SchedulerConfig(
        token_budget=64, max_num_seqs=4, block_size=4, num_blocks=64, batching="static"
    )
    s = Scheduler(config)
    request = Request("r", prompt_len=5, max_tokens=11)
    s.add_request(request)
    s.schedule()
    assert len(s.block_table(request)) == blocks_for(5 + 11, config.block_size) == 4


def test_continuous_batching_fills_a_finished_slot_at_once():
    config = SchedulerConfig(token_budget=64, max_num_seqs=2, block_size=4, num_blocks=64)
    run = drive(config, [Request("short", 4, 2), Request("long", 4, 10), Request("next", 4, 2)])
    assert run.admitted_at == {"short": 0, "long": 0, "next": 2}


# Failure modes


def test_bad_requests_are_refused():
    s = Scheduler(SchedulerConfig(token_budget=8, max_num_seqs=2, num_blocks=8))
    with pytest.raises(ValueError, match="at least 1"):
        s.add_request(Request("empty", prompt_len=0, max_tokens=4))
    with pytest.raises(ValueError, match="num_computed_tokens"):
        s.add_request(Request("ahead", prompt_len=4, max_tokens=4, num_computed_tokens=5))
    with pytest.raises(ValueError, match="already generated"):
        s.add_request(Request("done", prompt_len=4, max_tokens=2, num_output_tokens=2))


def test_when_decoding_runs_out_of_blocks_the_newest_is_preempted_and_requeued_first():
    # 4 blocks of 4 tokens. "old" and "new" each hold 2 blocks after their prompts; when
    # "old" crosses into a third block, "new" (admitted later) gives its blocks back.
    config = SchedulerConfig(
        token_budget=16, max_num_seqs=4, block_size=4, num_blocks=4, watermark=0.0
    )
    s = Scheduler(config)
    old, new, queued = Request("old", 8, 5), Request("new", 8, 5), Request("queued", 2, 1)
    for r in (old, new, queued):
        s.add_request(r)
    s.update_from_output(s.schedule())  # both prompts; each samples its first token
    assert [r.request_id for r in s.running] == ["old", "new"] and s.num_free_blocks == 0
    out = s.schedule()
    assert out.preempted == ["new"] and out.num_scheduled_tokens == {"old": 1}
    assert [r.request_id for r in s.waiting] == ["new", "queued"]
    assert new.num_computed_tokens == 0 and new.num_output_tokens == 1  # outputs kept
    assert s.block_table(new) == [] and new.num_preemptions == 1
    assert new.status is RequestStatus.WAITING and s.num_preemptions == 1
    s.update_from_output(out)
    while s.has_unfinished_requests():
        s.update_from_output(s.schedule())
    assert (old.num_output_tokens, new.num_output_tokens, queued.num_output_tokens) == (5, 5, 1)


def test_a_preempted_request_recomputes_its_prompt_and_outputs_before_decoding_again():
    config = SchedulerConfig(
        token_budget=16, max_num_seqs=4, block_size=4, num_blocks=4, watermark=0.0
    )
    new = Request("new", 8, 5)
    run = drive(config, [Request("old", 8, 5), new])
    # prompt (8), first preempted at 1 output; recompute 8 + 1 tokens in one chunk, then decode
    tokens = [n for n in steps_of(run, "new") if n]
    assert tokens[0] == 8 and tokens[1] == 9 and new.num_output_tokens == 5


def test_a_freshly_admitted_request_is_not_preempted_when_the_watermark_leaves_room():
    # Two decoders cross a block boundary on the same step a long prompt would be admitted
    # into the last free blocks. Without a watermark the prompt is admitted and thrown out
    # in that very step (prefill priority schedules it before the decodes); with one, it
    # waits for room instead and no work is lost.
    def run_with(watermark: float) -> tuple[Scheduler, SchedulerOutput]:
        config = SchedulerConfig(
            token_budget=32,
            max_num_seqs=4,
            block_size=4,
            num_blocks=8,
            priority="prefill",
            watermark=watermark,
        )
        s = Scheduler(config)
        for name in ("a", "b"):
            s.add_request(Request(name, prompt_len=4, max_tokens=8))
        s.update_from_output(s.schedule())  # a, b: 1 block each, next token needs a second
        s.add_request(Request("long", prompt_len=24, max_tokens=2))  # 6 blocks: all free ones
        return s, s.schedule()

    s, out = run_with(0.0)
    assert out.preempted == ["long"] and out.num_scheduled_tokens == {"a": 1, "b": 1}
    s, out = run_with(0.25)  # 2 blocks of headroom
    assert out.preempted == [] and out.num_scheduled_tokens == {"a": 1, "b": 1}
    assert s.waiting[0].request_id == "long"


def test_a_workload_that_thrashes_without_a_watermark_still_makes_progress():
    # Long-lived decoders grow into a pool kept full by a stream of long prompts.
    def workload():
        decoders = [Request(f"d{i}", prompt_len=16, max_tokens=400) for i in range(8)]
        return decoders + [Request(f"p{i}", prompt_len=100, max_tokens=40) for i in range(20)]

    results = {}
    for watermark in (0.0, 0.2):
        config = SchedulerConfig(
            token_budget=32, max_num_seqs=16, block_size=16, num_blocks=48, watermark=watermark
        )
        requests = workload()
        run = drive(config, requests, max_steps=5000)
        assert all(r.num_output_tokens == r.max_tokens for r in requests)
        results[watermark] = run.scheduler.num_preemptions
        # each preemption counted once, on the scheduler and on the request it hit
        assert sum(r.num_preemptions for r in requests) == results[watermark]
        assert max(r.num_preemptions for r in requests) > 1
    assert results[0.2] < results[0.0]


def test_the_block_manager_is_made_from_the_config_and_the_models_length():
    config = SchedulerConfig(block_size=4, num_blocks=16)
    blocks = Scheduler(config, max_model_len=10).block_manager
    assert (blocks.num_blocks, blocks.block_size, blocks.enable_prefix_caching) == (16, 4, True)
    assert blocks.max_blocks_per_table == 3  # a table holds a sequence of the model's length
    assert Scheduler(config).block_manager.max_blocks_per_table == 16  # no length: the pool
    off = SchedulerConfig(block_size=4, num_blocks=16, enable_prefix_caching=False)
    assert Scheduler(off, max_model_len=10).block_manager.enable_prefix_caching is False


def test_stats_count_requests_blocks_preemptions_and_prefix_cache_tokens():
    config = SchedulerConfig(token_budget=16, max_num_seqs=4, block_size=4, num_blocks=8)
    s = Scheduler(config)
    assert s.make_stats() == SchedulerStats(0, 0, 0, 0, 8, 0, 0)
    prompt = list(range(1, 9))
    s.add_request(Request("a", 8, 4, token_ids=list(prompt)))
    out = s.schedule()
    s.update_from_output(out, {"a": 9})  # a's prompt: two full blocks, now cached
    s.add_request(Request("b", 8, 4, token_ids=list(prompt)))
    s.add_request(Request("c", 4, 4))
    out = s.schedule()
    s.update_from_output(out, {"a": 10, "b": 9})  # b shares a's blocks, recomputes its last token
    assert s.make_stats() == SchedulerStats(
        num_running_reqs=3,
        num_waiting_reqs=0,
        num_preemptions=0,
        kv_blocks_used=2 + 1 + 1 + 1,  # two shared; b's copy of the last; a's third; c's
        kv_blocks_total=8,
        prefix_cache_queries=16,  # a's and b's prompts
        prefix_cache_hits=7,  # all of b's but the token it recomputes
    )


def test_finish_ends_a_request_wherever_it_is_and_frees_its_blocks():
    config = SchedulerConfig(token_budget=8, max_num_seqs=1, block_size=4, num_blocks=8)
    s = Scheduler(config)
    running, waiting = Request("running", 6, 4), Request("waiting", 6, 4)
    s.add_request(running)
    s.add_request(waiting)
    s.update_from_output(s.schedule())  # one seat: running holds it, waiting waits
    assert s.num_free_blocks == 6
    s.finish(waiting)
    assert list(s.waiting) == [] and s.running == [running] and s.num_free_blocks == 6
    s.finish(running)
    assert s.running == [] and s.num_free_blocks == 8 and not s.has_unfinished_requests()
    assert running.status is waiting.status is RequestStatus.FINISHED
    check_blocks(s.block_manager)


def test_fork_starts_a_second_sample_on_the_parents_blocks_after_its_first_token():
    config = SchedulerConfig(token_budget=16, max_num_seqs=4, block_size=4, num_blocks=8)
    s = Scheduler(config)
    parent, child = Request("p", 6, 4), Request("c", 6, 4)
    s.add_request(parent)
    with pytest.raises(ValueError, match="fork 'p' right after its first token"):
        s.fork(parent, child)  # still waiting
    s.update_from_output(s.schedule())  # the prompt, and the first token
    s.fork(parent, child)
    assert (child.num_computed_tokens, child.num_output_tokens) == (6, 1)
    assert child.num_cached_tokens == parent.num_cached_tokens == 0
    assert child.status is RequestStatus.RUNNING and s.running == [parent, child]
    assert s.block_table(child) == s.block_table(parent) and s.num_free_blocks == 6
    s.update_from_output(s.schedule())  # each writes its own second token
    assert s.block_table(child)[0] == s.block_table(parent)[0]  # the full block still shared
    assert s.block_table(child)[1] != s.block_table(parent)[1]  # the partial one copied
    with pytest.raises(ValueError, match="right after its first token"):
        s.fork(parent, Request("late", 6, 4))  # two tokens in: too late
    check_blocks(s.block_manager)


def big_behind_small(max_skips: int) -> Run:
    # "hog" holds most of the cache; "big" cannot fit beside it, "small" can.
    config = SchedulerConfig(
        token_budget=64,
        max_num_seqs=4,
        block_size=4,
        num_blocks=16,
        watermark=0.0,
        max_skips=max_skips,
    )
    requests = [Request("hog", 40, 8), Request("big", 30, 2)]
    requests += [Request(f"small{i}", 4, 4) for i in range(6)]
    return drive(config, requests, arrivals=[0, 1, 1, 1, 1, 2, 2, 2])


def test_strict_fcfs_blocks_everyone_behind_a_request_that_does_not_fit():
    run = big_behind_small(max_skips=0)
    order = sorted(run.admitted_at, key=run.admitted_at.get)
    assert order[:3] == ["hog", "big", "small0"]
    assert run.admitted_at["small0"] >= run.admitted_at["big"] > 1


def test_skipping_lets_small_requests_pass_a_blocked_one_a_bounded_number_of_times():
    run = big_behind_small(max_skips=2)
    assert run.admitted_at["small0"] == 1  # passed "big" at once
    passed = [
        k
        for k, t in run.admitted_at.items()
        if k.startswith("small") and t < run.admitted_at["big"]
    ]
    assert 1 <= len(passed) <= 2 * 4  # two skips, each admitting at most a full batch
    assert run.scheduler.running == [] and not run.scheduler.waiting


# Invariants on random workloads


@st.composite
def workloads(draw):
    block_size = draw(st.sampled_from([1, 2, 4, 16]))
    n = draw(st.integers(1, 12))
    prompts = draw(st.lists(st.integers(1, 48), min_size=n, max_size=n))
    outputs = draw(st.lists(st.integers(1, 48), min_size=n, max_size=n))
    arrivals = draw(st.lists(st.integers(0, 40), min_size=n, max_size=n))
    largest = max(-(-(p + o) // block_size) for p, o in zip(prompts, outputs, strict=True))
    max_num_seqs = draw(st.integers(1, 8))
    config = SchedulerConfig(
        token_budget=draw(st.integers(max_num_seqs, 64)),
        max_num_seqs=max_num_seqs,
        block_size=block_size,
        num_blocks=draw(st.integers(largest, 3 * largest)),
        batching=draw(st.sampled_from(["continuous", "static"])),
        priority=draw(st.sampled_from(["decode", "prefill"])),
        watermark=draw(st.sampled_from([0.0, 0.05, 0.2])),
        max_skips=draw(st.integers(0, 3)),
    )
    requests = [
        Request(str(i), p, o) for i, (p, o) in enumerate(zip(prompts, outputs, strict=True))
    ]
    return config, requests, arrivals


def check_step(s: Scheduler, out: SchedulerOutput, running_before: list[Request]) -> None:
    config = s.config
    assert out.total_num_scheduled_tokens == sum(out.num_scheduled_tokens.values())
    assert out.total_num_scheduled_tokens <= config.token_budget
    assert len(s.running) <= config.max_num_seqs
    check_blocks(s.block_manager)
    tables = [b for r in s.running for b in s.block_table(r)]
    assert len(tables) == len(set(tables)) and not set(tables) & set(s.block_manager.free_queue)
    assert len(tables) + s.num_free_blocks == config.num_blocks
    assert all(s.block_table(r) == [] for r in s.waiting)
    kv_read = attention_pairs = 0
    for request_id, n in out.num_scheduled_tokens.items():
        r = out.scheduled[request_id]
        assert r.status is RequestStatus.RUNNING
        assert 1 <= n <= r.num_tokens - r.num_computed_tokens
        assert len(s.block_table(r)) * config.block_size >= r.num_computed_tokens + n
        kv_read += r.num_computed_tokens
        attention_pairs += sum(r.num_computed_tokens + i + 1 for i in range(n))  # causal
    assert (out.kv_tokens_read, out.attention_pairs) == (kv_read, attention_pairs)
    if config.batching == "static" and running_before:
        assert {r.request_id for r in s.running} <= {r.request_id for r in running_before}


@settings(max_examples=300, derandomize=True, deadline=None)
@given(workloads())
def test_invariants_hold_and_every_request_finishes_with_its_output_length(workload):
    config, requests, arrivals = workload
    # Every step the oldest running request computes at least one token and is never
    # preempted (decode priority), so this many steps suffice; prefill priority can stall
    # decodes while prompts take the budget, so it gets a looser bound.
    bound = max(arrivals) + sum(r.prompt_len + r.max_tokens for r in requests)
    if config.priority == "prefill":
        bound *= 4
    s = Scheduler(config)
    pending = sorted(zip(arrivals, range(len(requests)), requests, strict=True))
    first_admission: list[str] = []
    step = 0
    while pending or s.has_unfinished_requests():
        assert step <= bound, f"starved: {len(s.waiting)} waiting after {step} steps"
        while pending and pending[0][0] <= step:
            s.add_request(pending.pop(0)[2])
        running_before = list(s.running)
        out = s.schedule()
        check_step(s, out, running_before)
        first_admission += [r.request_id for r in s.running if r.request_id not in first_admission]
        s.update_from_output(out)
        step += 1
    for r in requests:
        assert r.status is RequestStatus.FINISHED and r.num_output_tokens == r.max_tokens
        assert s.block_table(r) == []
    assert s.num_free_blocks == config.num_blocks
    if config.max_skips == 0:  # strict FCFS: first admissions in arrival order
        order = [
            r.request_id
            for _, _, r in sorted(zip(arrivals, range(len(requests)), requests, strict=True))
        ]
        assert first_admission == order


def test_a_decoding_request_is_scheduled_its_guesses_as_budget_and_max_tokens_allow():
    s = Scheduler(SchedulerConfig(token_budget=8, max_num_seqs=4, block_size=4, num_blocks=16))
    a = Request("a", prompt_len=5, max_tokens=4, token_ids=[1, 2, 3, 4, 5])
    s.add_request(a)
    s.update_from_output(s.schedule(), {"a": 6})  # the prompt; one token out, three to go
    a.spec_token_ids = [7, 8, 9, 10]
    out = s.schedule()
    # Three tokens may still come: the newest token and two guesses are checked.
    assert out.num_scheduled_tokens == {"a": 3} and out.scheduled_spec_decode_tokens == {
        "a": [7, 8]
    }
    assert a.spec_token_ids == [] and s.block_table(a) == [0, 1]  # slots for positions 5 to 7
    s.update_from_output(out, {"a": 11}, {"a": [7]})  # 7 accepted, 8 rejected, 11 drawn
    assert a.token_ids == [1, 2, 3, 4, 5, 6, 7, 11] and a.num_output_tokens == 3
    assert a.num_computed_tokens == 7 and a.is_decoding  # position 7 is written again next
    a.spec_token_ids = [12, 13]
    out = s.schedule()
    assert out.num_scheduled_tokens == {"a": 1} and not out.scheduled_spec_decode_tokens


def test_guesses_take_no_more_than_the_budget_left_and_rejected_ones_give_their_blocks_back():
    s = Scheduler(SchedulerConfig(token_budget=4, max_num_seqs=4, block_size=2, num_blocks=16))
    a = Request("a", prompt_len=2, max_tokens=20, token_ids=[1, 2])
    s.add_request(a)
    s.update_from_output(s.schedule(), {"a": 3})
    a.spec_token_ids = [4, 5, 6, 7, 8]
    out = s.schedule()
    assert out.scheduled_spec_decode_tokens == {"a": [4, 5, 6]}  # 1 + 3 fill the budget of 4
    assert len(s.block_table(a)) == 3  # positions 2 to 5 written: blocks of 0-1, 2-3, 4-5
    with pytest.raises(ValueError, match="not a prefix of its guesses"):
        s.update_from_output(out, {"a": 9}, {"a": [5]})
    s.update_from_output(out, {"a": 9}, {"a": []})  # all rejected: the block of 4-5 goes back
    assert a.token_ids == [1, 2, 3, 9] and a.num_computed_tokens == 3
    assert len(s.block_table(a)) == 2 and s.num_free_blocks == 14
    check_blocks(s.block_manager)
