"""The engine core's loop and its typed messages, on a thread (the same loop as a process)."""

from __future__ import annotations

import pytest

from llmserve_ref.engine.core_worker import (
    Abort,
    AddRequests,
    Closed,
    CoreSpec,
    Failed,
    Ready,
    StepDone,
    start_core,
)
from llmserve_ref.engine.interface import EngineRequest, FinishReason
from llmserve_ref.engine.scheduler_config import SchedulerConfig
from llmserve_ref.model.sampling import SamplingParams
from llmserve_ref.model.weights import TARGET_DIR, load_target

GREEDY = SamplingParams(temperature=0)


@pytest.fixture
def worker():
    model, _ = load_target("cpu")
    spec = CoreSpec(str(TARGET_DIR), "cpu", SchedulerConfig(max_num_seqs=8, num_blocks=64), 256)
    running = start_core(spec, model)
    ready = running.receive()
    assert isinstance(ready, Ready) and ready.stats.kv_blocks_total == 64
    yield running
    running.close()


def until(worker, kind):
    """The messages up to and including the first of type `kind`."""
    got = []
    while not got or not isinstance(got[-1], kind):
        got.append(worker.receive())
    return got


def test_a_request_runs_to_its_length_and_its_blocks_come_back(worker):
    worker.send(AddRequests([EngineRequest([0, 348, 352], GREEDY, 4, request_id="a")]))
    outputs = []
    while not outputs or outputs[-1].finish_reason is None:
        message = worker.receive()
        assert isinstance(message, StepDone)
        outputs += message.outputs
    assert [o.request_id for o in outputs] == ["a"] * 4
    assert outputs[-1].finish_reason is FinishReason.LENGTH
    assert message.stats.running == 0 and message.stats.kv_blocks_used == 0


def test_an_abort_frees_the_blocks_and_is_reported(worker):
    worker.send(AddRequests([EngineRequest([0, 348], GREEDY, 200, request_id="long")]))
    first = worker.receive()
    assert isinstance(first, StepDone) and first.stats.running == 1
    worker.send(Abort("long"))
    while (message := worker.receive()).stats.running:
        pass
    assert message.stats.kv_blocks_used == 0


def test_a_request_the_core_refuses_is_reported_failed_and_the_core_goes_on(worker):
    too_long = EngineRequest([0] * 250, GREEDY, 10, request_id="bad")  # 260 > 256 positions
    worker.send(AddRequests([too_long]))
    failed = until(worker, Failed)[-1]
    assert failed.request_ids == ["bad"] and "256" in failed.error
    worker.send(AddRequests([EngineRequest([0, 348], GREEDY, 2, request_id="ok")]))
    outputs = [o for m in until(worker, StepDone) for o in m.outputs]
    while not outputs or outputs[-1].finish_reason is None:
        outputs += worker.receive().outputs
    assert [o.request_id for o in outputs] == ["ok", "ok"]


def test_shutdown_answers_closed_with_the_last_counts(worker):
    worker.send(AddRequests([EngineRequest([0, 348], GREEDY, 2, request_id="a")]))
    until(worker, StepDone)
    worker.close()
    messages = []
    try:
        while True:
            messages.append(worker.receive())
    except (EOFError, OSError):
        pass
    assert isinstance(messages[-1], Closed)
