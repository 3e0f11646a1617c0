"""`--speculative-config` reads as vLLM 0.32 reads it: its keys, its defaults, its batch-size rule.

The oracle is vLLM's own `SpeculativeConfig` (built for ``ngram``, which needs no model) and
the lookup its scheduler builds from ``num_speculative_tokens_per_batch_size``.
"""

from __future__ import annotations

import dataclasses
import inspect
import random
import typing

import pytest

from llmserve_ref.engine.speculative_config import METHODS, SpeculativeConfig

from . import servers

if not servers.HAVE_VLLM:
    pytest.skip(servers.NEEDS_VLLM, allow_module_level=True)

import vllm.config.speculative
from vllm.config import SpeculativeConfig as VllmSpeculativeConfig
from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup


def test_every_key_we_take_is_one_of_vllms():
    ours = {f.name for f in dataclasses.fields(SpeculativeConfig)}
    assert ours <= set(VllmSpeculativeConfig.__dataclass_fields__), ours


def test_our_methods_are_vllms_and_our_draft_guesses_as_its_default_does():
    """Our draft model guesses its argmax and the check treats it as certain: vLLM's
    default draft_sample_method, "greedy" (the page quotes its docstring)."""
    from vllm.config.speculative import SpeculativeMethod

    assert set(METHODS) <= set(typing.get_args(SpeculativeMethod))
    field = VllmSpeculativeConfig.__dataclass_fields__["draft_sample_method"]
    assert field.default == "greedy"
    doc = inspect.getsource(vllm.config.speculative)
    assert "draft probabilities are treated as one-hot during rejection" in " ".join(doc.split())


@pytest.mark.parametrize(
    "given",
    [{}, {"prompt_lookup_max": 4}, {"prompt_lookup_min": 2}, {"prompt_lookup_min": 2,
     "prompt_lookup_max": 6}, {"prompt_lookup_min": 3, "prompt_lookup_max": 3}],
)  # fmt: skip
def test_the_lookup_lengths_resolve_as_vllms(given):
    keys = {"method": "ngram", "num_speculative_tokens": 3, **given}
    ours, theirs = SpeculativeConfig.from_dict(keys), VllmSpeculativeConfig(**keys)
    assert (ours.prompt_lookup_min, ours.prompt_lookup_max) == (
        theirs.prompt_lookup_min,
        theirs.prompt_lookup_max,
    )


def random_schedule(rng: random.Random, max_num_seqs: int) -> list[list[int]]:
    """Ranges from batch size 1, with gaps between them, each with its k (0 to 6)."""
    schedule, start = [], 1
    while start <= max_num_seqs and len(schedule) < 5:
        end = start + rng.randint(0, 20)
        schedule.append([start, end, rng.randint(0, 6)])
        start = end + 1 + rng.choice([0, 0, rng.randint(1, 10)])
    return schedule


def test_the_guesses_per_batch_size_are_vllms_on_random_schedules():
    rng = random.Random(0)
    for _ in range(300):
        k, max_num_seqs = rng.randint(1, 5), rng.randint(1, 80)
        schedule = random_schedule(rng, max_num_seqs)
        ours = SpeculativeConfig.from_dict(
            {"method": "ngram", "num_speculative_tokens": k,
             "num_speculative_tokens_per_batch_size": schedule}
        )  # fmt: skip
        theirs = build_dynamic_sd_schedule_lookup(schedule, max_num_seqs, k)
        assert [ours.num_guesses(b) for b in range(1, max_num_seqs + 1)] == theirs[1:], schedule


@pytest.mark.parametrize(
    "schedule",
    [[], [[2, 4, 1]], [[1, 4, 1], [3, 8, 2]], [[1, 0, 1]], [[1, 4, -1]], [[0, 4, 1]]],
    ids=["empty", "not-from-1", "overlap", "reversed", "negative-k", "zero"],
)
def test_a_schedule_vllm_refuses_we_refuse(schedule):
    with pytest.raises(ValueError):
        build_dynamic_sd_schedule_lookup(schedule, 64, 4)
    with pytest.raises(ValueError, match="num_speculative_tokens_per_batch_size"):
        SpeculativeConfig.from_dict(
            {"method": "ngram", "num_speculative_tokens": 4,
             "num_speculative_tokens_per_batch_size": schedule}
        )  # fmt: skip
