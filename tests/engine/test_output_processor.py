"""The output processor: the one home of the token -> text -> event rules, for both engines."""

from __future__ import annotations

import asyncio

import pytest

from llmserve_ref.engine.interface import (
    EngineRequest,
    FinishReason,
    RequestStream,
    TokenOutput,
)
from llmserve_ref.engine.output_processor import OutputProcessor
from llmserve_ref.model.sampling import TokenLogprobs
from llmserve_ref.model.tokenizer import Tokenizer
from llmserve_ref.model.weights import TARGET_DIR


@pytest.fixture(scope="module")
def tokenizer():
    return Tokenizer.from_file(TARGET_DIR)


def follow(processor: OutputProcessor, request: EngineRequest) -> RequestStream:
    """A stream for `request` (on a loop that is never run: events are only built here)."""
    stream = RequestStream(request.request_id, asyncio.new_event_loop())
    processor.add_request(request, stream)
    return stream


def test_text_comes_out_whole_characters_and_a_stop_token_shows_none(tokenizer):
    processor = OutputProcessor(tokenizer)
    ids = tokenizer.encode(" Zoé sat")
    follow(processor, EngineRequest([0], max_tokens=16, request_id="r"))
    outputs = [TokenOutput("r", t) for t in ids]
    outputs.append(TokenOutput("r", tokenizer.eos_id, FinishReason.STOP))
    events, stopped = processor.process(outputs)
    texts = [e.text for _, e in events]
    assert "".join(texts) == " Zoé sat" and "�" not in "".join(texts)
    last = events[-1][1]
    assert (last.text, last.finish_reason, last.token_id) == ("", "stop", tokenizer.eos_id)
    assert last.timings.predicted_n == len(ids) + 1 and last.timings.prompt_n == 1
    assert stopped == [] and processor.states == {}  # the engine ended it itself


def test_a_stop_string_ends_the_request_and_the_engine_is_told_to_drop_it(tokenizer):
    processor = OutputProcessor(tokenizer)
    follow(processor, EngineRequest([0], max_tokens=16, stop=(" sat",), request_id="r"))
    events, stopped = processor.process(
        TokenOutput("r", t) for t in tokenizer.encode(" a cat sat on")
    )
    assert "".join(e.text for _, e in events) == " a cat"
    assert events[-1][1].finish_reason == FinishReason.STOP and stopped == ["r"]
    # tokens the engine computed before it heard of it go nowhere
    assert processor.process([TokenOutput("r", 5)]) == ([], [])


def test_the_last_token_flushes_what_was_held_back(tokenizer):
    processor = OutputProcessor(tokenizer)
    follow(processor, EngineRequest([0], max_tokens=3, stop=(" sat down",), request_id="r"))
    ids = tokenizer.encode(" a cat sat")  # " sat" may start the stop string: held back
    outputs = [TokenOutput("r", t) for t in ids[:-1]]
    outputs.append(TokenOutput("r", ids[-1], FinishReason.LENGTH))
    events, stopped = processor.process(outputs)
    assert "".join(e.text for _, e in events) == " a cat sat"
    assert events[-1][1].finish_reason == FinishReason.LENGTH and stopped == []


def test_cached_tokens_logprobs_and_abort(tokenizer):
    processor = OutputProcessor(tokenizer)
    follow(processor, EngineRequest([0, 1, 2], max_tokens=8, request_id="a"))
    follow(processor, EngineRequest([0], max_tokens=8, request_id="b"))
    lp = TokenLogprobs(-0.5, [(7, -0.5)])
    events, _ = processor.process([TokenOutput("a", 7, logprobs=lp, num_cached_tokens=2)])
    assert events[0][1].logprobs == lp
    aborted = processor.abort(["a", "b", "gone"])
    assert [(s.request_id, e.finish_reason) for s, e in aborted] == [("a", "abort"), ("b", "abort")]
    assert aborted[0][1].num_cached_tokens == 2 and aborted[1][1].token_id is None
    assert processor.states == {}


def test_a_dropped_request_gets_no_event(tokenizer):
    processor = OutputProcessor(tokenizer)
    follow(processor, EngineRequest([0], max_tokens=8, request_id="r"))
    assert processor.drop("r") and not processor.drop("r")
    assert processor.process([TokenOutput("r", 5)]) == ([], [])
    assert processor.abort(["r"]) == []
