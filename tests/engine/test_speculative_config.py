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
        ('{"method": "draft_model", "num_speculative_tokens": 2}', "needs 'model': tiny-draft"),
        ('{"method": "draft_model", "model": 3, "num_speculative_tokens": 2}', "must be a string"),
        ('{"method": "draft_model", "model": "/nowhere", "num_speculative_tokens": 2}',
         "'/nowhere' is neither a model this package ships"),
        ('{"method": "draft_model", "model": "tiny-draft", "num_speculative_tokens": 0}',
         "num_speculative_tokens must be"),
        ('{"method": "draft_model", "model": "tiny-draft", "num_speculative_tokens": 2, '
         '"prompt_lookup_max": 3}', "are for the ngram method"),
        ('{"method": "ngram", "model": "tiny-draft", "num_speculative_tokens": 2}',
         "the ngram method takes none"),
    ],
)  # fmt: skip
def test_a_bad_config_is_refused_with_what_was_wrong(text, message):
    with pytest.raises(ValueError, match=message):
        SpeculativeConfig.from_json(text)


def test_a_draft_model_is_named_as_vllm_names_it_and_loads_with_the_engines_blocks(tmp_path):
    """vLLM's ``model`` key: a shipped model's name, or a directory; the proposer pages the
    draft's KV in the blocks the engine's scheduler has."""
    import shutil

    from llmserve_ref.engine.draft_proposer import DraftProposer
    from llmserve_ref.engine.scheduler_config import SchedulerConfig
    from llmserve_ref.model.weights import DRAFT_DIR

    copy = shutil.copytree(DRAFT_DIR, tmp_path / "my-draft")
    scheduler = SchedulerConfig(token_budget=64, max_num_seqs=4, block_size=8, num_blocks=32)
    for name in ("tiny-draft", str(copy)):
        config = SpeculativeConfig.from_dict(
            {"method": "draft_model", "model": name, "num_speculative_tokens": 3}
        )
        assert config.draft_config().num_hidden_layers == 2
        proposer = config.proposer(scheduler=scheduler)
        assert isinstance(proposer, DraftProposer) and proposer.num_speculative_tokens == 3
        assert (proposer.runner.storage.num_blocks, proposer.runner.storage.block_size) == (32, 8)
    with pytest.raises(ValueError, match="give the engine's SchedulerConfig"):
        config.proposer()
