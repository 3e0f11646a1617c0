"""`usage.prompt_tokens_details.cached_tokens`: what our server reports is what vLLM reports.

vLLM 0.32 reports the field only when started with ``--enable-prompt-tokens-details``
(servers.vllm_command passes it); ours always does. Both count the prompt tokens found in
the prefix cache when the request was admitted, in whole blocks of 32 here, streamed or not.
They differ, as documented on the prefix-caching and engines pages, when a whole prompt is
cached: vLLM drops the last block from the hit and recomputes it, ours recomputes one token.
"""

from __future__ import annotations

import json
import uuid

import httpx
import pytest

from llmserve_ref.model.tokenizer import Tokenizer
from llmserve_ref.model.weights import TARGET_DIR

from . import servers

if not servers.HAVE_VLLM:
    pytest.skip(servers.NEEDS_VLLM, allow_module_level=True)


def fresh(num_tokens: int) -> list[int]:
    """A prompt of token ids no other request sent: <|bos|>, a random start, then text."""
    tokenizer = Tokenizer.from_file(TARGET_DIR)
    text = f"{uuid.uuid4().hex} Once upon a time, there was a little fox named Leo. " * 8
    return tokenizer.encode(text, add_bos=True)[:num_tokens]


def cached_tokens(server: servers.Server, prompt: list[int], stream: bool) -> int:
    body = {"model": servers.MODEL_NAME, "prompt": prompt, "max_tokens": 2, "temperature": 0}
    url = f"{server.base_url}/completions"
    if not stream:
        return httpx.post(url, json=body, timeout=60).json()["usage"]["prompt_tokens_details"][
            "cached_tokens"
        ]
    body |= {"stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", url, json=body, timeout=60) as response:
        events = [line for line in response.iter_lines() if line.startswith("data: {")]
    return json.loads(events[-1][6:])["usage"]["prompt_tokens_details"]["cached_tokens"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_both_report_the_same_cached_tokens(vllm, ours, stream):
    prompt = fresh(80)  # two whole blocks of 32, and 16 tokens in a third
    counts = {s.name: [cached_tokens(s, prompt, stream) for _ in range(2)] for s in (vllm, ours)}
    assert counts == {"vLLM": [0, 64], "llmserve-ref": [0, 64]}


def test_a_whole_cached_prompt_is_where_they_differ(vllm, ours):
    prompt = fresh(64)
    counts = {s.name: [cached_tokens(s, prompt, False) for _ in range(2)] for s in (vllm, ours)}
    assert counts == {"vLLM": [0, 32], "llmserve-ref": [0, 63]}
