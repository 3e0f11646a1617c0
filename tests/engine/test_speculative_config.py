"""`--speculative-config`: vLLM's keys and defaults, and a clear error for anything else."""

from __future__ import annotations

import pytest

from llmserve_ref.engine.ngram_proposer import NgramProposer
from llmserve_ref.engine.speculative_config import SpeculativeConfig


@pytest.mark.parametrize(
    ("given", "low", "high"),
    [({}, 5, 5), ({"prompt_lookup_max": 4}, 4, 4), ({"prompt_lookup_min": 2}, 2, 2),
     ({"prompt_lookup_min": 2, "prompt_lookup_max": 6}, 2, 6)],
)  # fmt: skip
def test_ngram_lookup_lengths_default_as_in_vllm(given, low, high):
    config = SpeculativeConfig.from_dict({"method": "ngram", "num_speculative_tokens": 3, **given})
    assert (config.prompt_lookup_min, config.prompt_lookup_max) == (low, high)
    assert config.proposer(max_model_len=100) == NgramProposer(low, high, 3, 100)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not valid JSON"),
        ("[1]", "must be a JSON object"),
        ('{"method": "ngram"}', "needs 'num_speculative_tokens'"),
        ('{"num_speculative_tokens": 2}', "needs 'method'"),
        ('{"method": "medusa", "num_speculative_tokens": 2}', "'medusa' is not one this engine"),
        ('{"method": "ngram", "num_speculative_tokens": 2, "lookup": 3}', "unknown .* 'lookup'"),
        ('{"method": "ngram", "num_speculative_tokens": "2"}', "must be an integer"),
        ('{"method": "ngram", "num_speculative_tokens": true}', "must be an integer"),
        ('{"method": "ngram", "num_speculative_tokens": 0}', "num_speculative_tokens must be"),
        ('{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 2, '
         '"prompt_lookup_min": 3}', r"prompt_lookup_max \(2\) must be at least"),
    ],
)  # fmt: skip
def test_a_bad_config_is_refused_with_what_was_wrong(text, message):
    with pytest.raises(ValueError, match=message):
        SpeculativeConfig.from_json(text)
