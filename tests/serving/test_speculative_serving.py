"""`serve --speculative-config`: the same answers, sooner, through HTTP.

Two servers side by side, one guessing (with prompt lookup, vLLM's ``ngram``, or with the
draft model, vLLM's ``draft_model``), one not:
the same concurrent requests (greedy and seeded, streamed and not, with stop strings,
logprobs and ``n``) get the same JSON answers, text, tokens and finish reasons, and the
speculating server's engine really checked guesses.
"""

from __future__ import annotations

import concurrent.futures

import httpx
import pytest

from conftest import post
from llmserve_ref.engine.batched_engine import BatchedEngine
from llmserve_ref.engine.engine_config import EngineConfig
from llmserve_ref.engine.speculative_config import SpeculativeConfig
from llmserve_ref.model import corpus
from llmserve_ref.serving.launcher import serve_in_thread

NGRAM = SpeculativeConfig(
    method="ngram", num_speculative_tokens=4, prompt_lookup_max=4, prompt_lookup_min=1
)


DRAFT = SpeculativeConfig(method="draft_model", model="tiny-draft", num_speculative_tokens=4)


@pytest.fixture(scope="module", params=[NGRAM, DRAFT], ids=["ngram", "draft_model"])
def speculating(request):
    engine = BatchedEngine.load(config=EngineConfig(speculative_config=request.param))
    with serve_in_thread("tiny", engine=engine) as running:
        yield running
    engine.close()


def bodies() -> list[dict]:
    """Requests whose texts repeat (lookup guesses) and whose parameters differ."""
    stories = corpus.heldout_documents(6)
    retell = [s[:200] + " " + s[:40] for s in stories]
    kinds = [
        {"temperature": 0},
        {"temperature": 0, "logprobs": 2},
        {"temperature": 0.8, "seed": 3, "top_p": 0.9},
        {"temperature": 0, "stop": [" the"]},
        {"temperature": 0.9, "seed": 7, "n": 2},
        {"temperature": 0, "presence_penalty": 0.4},
    ]
    return [
        {"model": "tiny", "prompt": text, "max_tokens": 40, **kind}
        for text, kind in zip(retell, kinds, strict=True)
    ]


def answers(server) -> list[dict]:
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        responses = list(pool.map(lambda body: post(server, body), bodies()))
    found = []
    for response in responses:
        assert response.status_code == 200, response.text
        body = response.json()
        # (cached prompt tokens depend on what the server served before: not compared)
        usage = {k: v for k, v in body["usage"].items() if k != "prompt_tokens_details"}
        found.append({"choices": body["choices"], "usage": usage})
    return found


def same(a, b) -> None:
    """Equal JSON, but logprobs to float rounding (guesses are scored as a short chunk, whose
    sums run in another order than a single token's)."""
    if isinstance(a, float) or isinstance(b, float):
        assert a == pytest.approx(b, abs=1e-4)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            same(a[key], b[key])
    elif isinstance(a, list):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            same(x, y)
    else:
        assert a == b


def test_a_speculating_server_answers_as_one_that_does_not(server, speculating):
    same(answers(speculating), answers(server))
    stats = speculating.engine.stats().spec_decoding
    assert 0 < stats.num_accepted_tokens < stats.num_draft_tokens


def test_a_bad_speculative_config_stops_serve_with_what_was_wrong(capsys):
    from llmserve_ref.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--speculative-config", '{"method": "eagle"}'])
    assert "needs 'num_speculative_tokens'" in capsys.readouterr().err


def families(server) -> dict:
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_metrics_count_drafts_and_accepted_tokens_by_position_with_vllms_names(server, speculating):
    answers(speculating)
    found = families(speculating)
    stats = speculating.engine.stats().spec_decoding
    for name in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
        family = found[f"llmserve:spec_decode_{name}"]
        assert family.type == "counter"
        [sample] = family.samples
        assert sample.labels == {"engine": "0", "model_name": "tiny"}
        assert sample.value == getattr(stats, name) > 0
    per_pos = found["llmserve:spec_decode_num_accepted_tokens_per_pos"]
    assert per_pos.type == "counter"
    by_position = {s.labels["position"]: s.value for s in per_pos.samples}
    assert list(by_position) == ["0", "1", "2", "3"]  # every position, from the start
    assert sum(by_position.values()) == stats.num_accepted_tokens
    assert list(by_position.values()) == sorted(by_position.values(), reverse=True)
    # A server that does not guess has none of them (nor has vLLM's).
    assert not [name for name in families(server) if "spec_decode" in name]


def test_a_draft_models_kv_takes_its_share_of_the_cache_memory(speculating):
    """The KV memory holds both models' keys and values per block: float32, per token,
    layers x (K, V) x KV heads x head dim x 4 bytes, from each config.json: the target's
    4 x 2 x 2 x 32 x 4 = 2,048, the draft's 2 x 2 x 1 x 32 x 4 = 512."""
    engine = speculating.engine
    per_token = 2048 + (512 if engine.speculative_config.method == "draft_model" else 0)
    assert engine.bytes_per_block == 16 * per_token
    assert engine.num_blocks == engine.config.kv_cache_memory_bytes // (16 * per_token)
