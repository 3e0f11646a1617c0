"""The engine interface: finish reasons as strings, events handed across threads, merged."""

from __future__ import annotations

import asyncio
import json
import threading

from llmserve_ref.engine.interface import (
    FinishReason,
    RequestStream,
    TokenEvent,
    deliver,
    merge,
)


def test_a_finish_reason_is_the_string_openai_sends():
    assert FinishReason.STOP == "stop" and f"{FinishReason.LENGTH}" == "length"
    assert json.dumps({"finish_reason": FinishReason.ABORT}) == '{"finish_reason": "abort"}'
    assert repr(FinishReason.STOP) == "'stop'"
    assert {r.value for r in FinishReason} == {"stop", "length", "abort"}


def test_events_delivered_from_another_thread_arrive_in_order_and_end_the_stream():
    async def main() -> list[TokenEvent]:
        stream = RequestStream("r", asyncio.get_running_loop())
        events = [TokenEvent("a", 1), TokenEvent("b", 2), TokenEvent("", 3, FinishReason.LENGTH)]
        worker = threading.Thread(target=lambda: [deliver([(stream, e)]) for e in events])
        worker.start()
        got = [e async for e in stream]
        worker.join()
        assert stream.finished
        return got

    got = asyncio.run(main())
    assert [e.token_id for e in got] == [1, 2, 3] and got[-1].finish_reason == "length"


def test_merge_yields_each_streams_events_as_they_come_until_all_end():
    async def main() -> list[tuple[int, str]]:
        loop = asyncio.get_running_loop()
        a, b = RequestStream("a", loop), RequestStream("b", loop)
        deliver([(b, TokenEvent("b1", 1)), (a, TokenEvent("a1", 1))])
        deliver([(a, TokenEvent("a2", 2, FinishReason.STOP)), (b, TokenEvent("b2", 2))])
        deliver([(b, TokenEvent("b3", 3, FinishReason.LENGTH))])
        return [(i, e.text) async for i, e in merge([a, b])]

    got = asyncio.run(main())
    assert sorted(got) == [(0, "a1"), (0, "a2"), (1, "b1"), (1, "b2"), (1, "b3")]
    assert [t for i, t in got if i == 1] == ["b1", "b2", "b3"]  # each stream in its order


def test_deliver_to_a_closed_loop_is_dropped_quietly():
    loop = asyncio.new_event_loop()
    stream = RequestStream("r", loop)
    loop.close()
    deliver([(stream, TokenEvent("x", 1))])  # nobody listens: no error
