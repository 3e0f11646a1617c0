"""vLLM is the reference for what a sampling value may be: the same bad value sent to
both servers must be refused by both, with a 400 that names the field on ours, and the
edge values vLLM accepts must be accepted by ours too."""

from __future__ import annotations

import json

import httpx
import pytest

from . import servers

if not servers.HAVE_VLLM:
    pytest.skip(servers.NEEDS_VLLM, allow_module_level=True)

# ignore_eos: every accepted request generates its 4 tokens, whatever it samples (at
# temperature 2 the end-of-sequence token comes early now and then).
BODY = {"model": "tiny", "prompt": "Once upon a time,", "max_tokens": 4, "ignore_eos": True}
REFUSED = [
    ("temperature", -0.5),
    ("temperature", 2.5),
    ("temperature", float("nan")),
    ("temperature", float("inf")),
    ("top_p", 0.0),
    ("top_p", 1.5),
    ("min_p", 1.5),
    ("repetition_penalty", 0.0),
    ("repetition_penalty", float("nan")),
    ("frequency_penalty", 2.5),
    ("presence_penalty", -2.5),
    ("seed", 2**64),
    ("seed", -(2**63) - 1),
    ("min_tokens", 5),  # above max_tokens (4)
]
ACCEPTED = [
    ("temperature", 0.0),
    ("temperature", 2.0),
    ("temperature", 1e-300),  # vLLM raises it to 0.01; so do we
    ("top_p", 1.0),
    ("min_p", 1.0),
    ("frequency_penalty", -2.0),
    ("seed", 2**63 - 1),
    ("seed", -(2**63)),
]


def send(server: servers.Server, field: str, value: object) -> httpx.Response:
    # json.dumps writes NaN and Infinity, which both servers' JSON parsers read.
    content = json.dumps({**BODY, field: value})
    headers = {"content-type": "application/json"}
    return httpx.post(
        f"{server.base_url}/completions", content=content, headers=headers, timeout=60
    )


@pytest.mark.parametrize(("field", "value"), REFUSED, ids=[f"{f}={v}" for f, v in REFUSED])
def test_a_value_vllm_refuses_we_refuse(vllm, ours, field, value):
    theirs, mine = send(vllm, field, value), send(ours, field, value)
    assert 400 <= theirs.status_code < 500, theirs.text
    assert mine.status_code == 400, mine.text
    assert mine.json()["error"]["param"] == field


@pytest.mark.parametrize(("field", "value"), ACCEPTED, ids=[f"{f}={v}" for f, v in ACCEPTED])
def test_a_value_vllm_accepts_we_accept(vllm, ours, field, value):
    theirs, mine = send(vllm, field, value), send(ours, field, value)
    assert theirs.status_code == 200, theirs.text
    assert mine.status_code == 200, mine.text
    assert mine.json()["usage"]["completion_tokens"] == BODY["max_tokens"]
