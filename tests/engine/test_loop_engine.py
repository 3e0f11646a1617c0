"""Both engines: the same tokens as the plain generation loop, interleaved, seeded, cancellable.

`LoopEngine` (one forward pass per request per step) and `BatchedEngine` (continuous
batching on paged KV, its core in a process of its own) behind one interface, held to the
same behaviour."""

from __future__ import annotations

import asyncio
import time

import pytest
import torch

from conftest import wait_until
from llmserve_ref.device import get_device
from llmserve_ref.engine.batched_engine import BatchedEngine
from llmserve_ref.engine.engine_config import EngineConfig
from llmserve_ref.engine.interface import Engine, EngineRequest, EngineUnavailable, TokenEvent
from llmserve_ref.engine.loop_engine import LoopEngine
from llmserve_ref.model.generate import generate
from llmserve_ref.model.sampling import SamplingParams
from llmserve_ref.model.weights import load_target


def make_engine(kind: str, max_running: int = 32) -> Engine:
    if kind == "loop":
        return LoopEngine(*load_target(get_device()), max_running=max_running)
    config = EngineConfig(max_num_seqs=max_running, max_num_batched_tokens=max(max_running, 256))
    return BatchedEngine.load("tiny", get_device(), config)


@pytest.fixture(scope="module", params=["loop", "batched"])
def engine(request):
    engine = make_engine(request.param)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def target():
    return load_target(get_device())


def prompt(engine: Engine, text: str = "Once upon a time,") -> list[int]:
    return engine.tokenizer.encode(text, add_bos=True)


async def collect(engine: Engine, request: EngineRequest) -> list[TokenEvent]:
    return [event async for event in engine.submit(request)]


def run(coro):
    return asyncio.run(coro)


@pytest.mark.parametrize(
    "params",
    [SamplingParams(temperature=0), SamplingParams(temperature=0.9, top_p=0.95, seed=7)],
    ids=["greedy", "seeded"],
)
def test_the_engine_samples_the_same_tokens_as_the_generation_loop(engine, target, params):
    ids = prompt(engine)
    expected = list(
        generate(
            target[0], ids, params, max_new_tokens=40, stop_token_ids={engine.tokenizer.eos_id}
        )
    )
    events = run(collect(engine, EngineRequest(ids, params, max_tokens=40)))
    assert [e.token_id for e in events] == expected
    text = "".join(e.text for e in events)
    assert text == engine.tokenizer.decode(expected, skip_special_tokens=True)
    assert events[-1].finish_reason == (
        "stop" if expected[-1] == engine.tokenizer.eos_id else "length"
    )
    assert all(e.finish_reason is None for e in events[:-1])


def test_each_event_carries_its_tokens_logprobs_if_asked(engine, target):
    """Every token's logprob and top 2, as the model computes them here at its position,
    through the engine's thread (and the core's pipe); none for a request that did not ask."""
    ids = prompt(engine)
    events = run(collect(engine, EngineRequest(ids, SamplingParams(0, logprobs=2), 12)))
    tokens = [e.token_id for e in events]
    with torch.inference_mode():
        logits = target[0](torch.tensor([ids + tokens], device=target[0].device))
    expected = logits[0, len(ids) - 1 : -1].float().log_softmax(-1).cpu()
    for event, row in zip(events, expected, strict=True):
        assert abs(event.logprobs.logprob - float(row[event.token_id])) < 1e-4
        assert [v for _, v in event.logprobs.top] == pytest.approx(
            row.topk(2).values.tolist(), abs=1e-4
        )
    plain = run(collect(engine, EngineRequest(ids, SamplingParams(0), 4)))
    assert all(e.logprobs is None for e in plain)


def test_min_tokens_holds_off_the_stop_tokens(engine, target):
    """The engines stop at any added token (<|eos|> and the chat markers), so min_tokens
    holds off all of them, and the tokens are those the generation loop picks."""
    ids = prompt(engine, "Once upon a time, there was a fox.")
    stops = set(engine.tokenizer.backend.get_added_tokens_decoder())
    ended = list(generate(target[0], ids, SamplingParams(0), 200, stop_token_ids=stops))
    assert ended[-1] in stops, "the test needs a prompt whose greedy text ends"
    params = SamplingParams(0, min_tokens=len(ended) + 3)
    expected = list(generate(target[0], ids, params, 200, stop_token_ids=stops))
    events = run(collect(engine, EngineRequest(ids, params, 200)))
    assert [e.token_id for e in events] == expected
    assert len(expected) >= params.min_tokens and not stops & set(expected[: params.min_tokens])


def test_timings_count_the_prompt_and_the_generated_tokens(engine):
    ids = prompt(engine)
    events = run(collect(engine, EngineRequest(ids, SamplingParams(temperature=0), 10)))
    t = events[-1].timings
    assert (t.prompt_n, t.predicted_n) == (len(ids), len(events))
    assert t.prompt_ms > 0 and t.predicted_ms > 0


def test_concurrent_requests_get_what_they_get_alone(engine):
    ids = prompt(engine)
    requests = [EngineRequest(ids, SamplingParams(temperature=1.0, seed=s), 30) for s in range(8)]
    alone = [run(collect(engine, r)) for r in requests]

    async def together():
        fresh = [EngineRequest(r.prompt_ids, r.params, r.max_tokens) for r in requests]
        return await asyncio.gather(*(collect(engine, r) for r in fresh))

    assert [[e.token_id for e in x] for x in run(together())] == [
        [e.token_id for e in x] for x in alone
    ]
    assert len({tuple(e.token_id for e in x) for x in alone}) > 1  # the seeds do differ


def test_concurrent_requests_are_interleaved_not_queued(engine):
    """Each loop steps every active sequence: the second request's first token comes long
    before the first request's last."""
    ids = prompt(engine)
    order: list[tuple[int, bool]] = []

    async def one(i: int):
        request = EngineRequest(ids, SamplingParams(temperature=0), 40)
        async for event in engine.submit(request):
            order.append((i, event.finish_reason is not None))

    async def both():
        await asyncio.gather(one(0), one(1))

    run(both())
    first_of_1 = order.index(next(o for o in order if o[0] == 1))
    last_of_0 = order.index((0, True))
    assert first_of_1 < last_of_0 / 4


@pytest.mark.parametrize("kind", ["loop", "batched"])
def test_beyond_max_running_requests_wait_for_a_slot(kind):
    engine = make_engine(kind, max_running=1)
    ids = engine.tokenizer.encode("Once", add_bos=True)
    order: list[tuple[int, bool]] = []

    async def one(i: int):
        async for event in engine.submit(EngineRequest(ids, SamplingParams(temperature=0), 5)):
            order.append((i, event.finish_reason is not None))

    async def both():
        await asyncio.gather(one(0), one(1))

    try:
        run(both())
    finally:
        engine.close()
    assert [i for i, _ in order] == [0] * 5 + [1] * 5


def test_a_stop_string_ends_the_sequence_and_is_not_emitted(engine):
    ids = prompt(engine)
    free = "".join(e.text for e in run(collect(engine, EngineRequest(ids, SamplingParams(0), 30))))
    stop = free[10:18]  # from the middle of the text, several tokens long
    events = run(collect(engine, EngineRequest(ids, SamplingParams(0), 30, stop=(stop,))))
    assert "".join(e.text for e in events) == free[: free.index(stop)]
    assert events[-1].finish_reason == "stop"


def test_cancel_stops_stepping_and_frees_the_cache(engine):
    ids = prompt(engine)

    async def start_then_cancel():
        stream = engine.submit(EngineRequest(ids, SamplingParams(temperature=0), 200))
        await anext(stream)
        await anext(stream)
        assert engine.stats().running == 1 and engine.stats().kv_cache_bytes > 0
        engine.cancel(stream.request_id)

    run(start_then_cancel())
    wait_until(lambda: engine.stats().running == 0)
    assert engine.stats().kv_cache_bytes == 0
    steps = engine.stats().steps
    time.sleep(0.2)
    assert engine.stats().steps == steps


def test_requests_that_do_not_fit_are_refused(engine):
    async def submit(request):
        engine.submit(request)

    with pytest.raises(ValueError, match="positions"):
        run(submit(EngineRequest([0] * 250, max_tokens=10)))
    with pytest.raises(ValueError, match="the prompt is empty"):
        run(submit(EngineRequest([], max_tokens=10)))
    vocab = engine.tokenizer.vocab_size
    with pytest.raises(ValueError, match=rf"ids \[{vocab}\] are outside the vocabulary"):
        run(submit(EngineRequest([0, vocab], max_tokens=10)))


@pytest.mark.parametrize("kind", ["loop", "batched"])
def test_drain_refuses_new_requests_and_aborts_what_is_left_after_the_grace(kind):
    engine = make_engine(kind)
    ids = engine.tokenizer.encode("Once", add_bos=True)

    async def scenario():
        stream = engine.submit(EngineRequest(ids, SamplingParams(temperature=0), 200))
        await anext(stream)
        engine.drain(0.0)
        with pytest.raises(EngineUnavailable):
            engine.submit(EngineRequest(ids, max_tokens=5))
        return [event async for event in stream]

    try:
        events = run(scenario())
    finally:
        engine.close()
    assert events[-1].finish_reason == "abort"
    assert len(events) < 100
    assert engine.stats().running == 0
