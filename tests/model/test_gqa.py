"""GQA conversion: mean-pooling K/V heads, uptraining, and the two decode attentions."""

import json

import pytest
import torch
import torch.nn.functional as F

from llmserve_ref.model import corpus
from llmserve_ref.model.gqa import (
    MHA_DIR,
    mean_pool_kv_heads,
    repeat_kv,
    repeated_kv_attention,
    shared_kv_attention,
    uptrain,
)
from llmserve_ref.model.train import evaluate, token_stream
from llmserve_ref.model.weights import load

ATOL = 1e-5


@pytest.fixture
def mha_model(tiny_llama):
    """`mha_model()`: multi-head attention, 8 query heads and 8 K/V heads."""
    return lambda: tiny_llama(
        num_attention_heads=8, num_key_value_heads=8, max_position_embeddings=32
    )


def ids(seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
@pytest.mark.parametrize("num_kv_heads", [1, 2, 4])
def test_pooling_heads_that_are_already_equal_is_exact(num_kv_heads, mha_model):
    model = mha_model()
    group, head_dim = 8 // num_kv_heads, model.config.head_dim
    for block in model.model["layers"]:
        for proj in (block.self_attn.k_proj, block.self_attn.v_proj):
            w = proj.weight.view(num_kv_heads, group, head_dim, -1)
            w.copy_(w[:, :1].expand_as(w))  # every head of a group = the group's first head
    pooled = mean_pool_kv_heads(model, num_kv_heads)
    torch.testing.assert_close(pooled(ids()), model(ids()), atol=ATOL, rtol=0)


@torch.no_grad()
def test_pooled_heads_are_group_means_and_the_rest_is_copied(mha_model):
    model = mha_model()
    pooled = mean_pool_kv_heads(model, 2)
    assert pooled.config.num_key_value_heads == 2
    assert pooled.config.num_attention_heads == 8
    old, new = model.model["layers"][1].self_attn, pooled.model["layers"][1].self_attn
    assert new.k_proj.weight.shape == (2 * 8, 64) and new.v_proj.weight.shape == (2 * 8, 64)
    heads = old.v_proj.weight.view(8, 8, 64)  # [kv heads, head_dim, hidden]
    torch.testing.assert_close(new.v_proj.weight[8:], heads[4:].mean(0))  # head 1 = mean(4..7)
    torch.testing.assert_close(new.k_proj.weight[:8], old.k_proj.weight.view(8, 8, 64)[:4].mean(0))
    torch.testing.assert_close(new.q_proj.weight, old.q_proj.weight)
    torch.testing.assert_close(pooled.lm_head.weight, model.lm_head.weight)
    assert pooled.lm_head.weight is pooled.model["embed_tokens"].weight  # still tied
    assert model.config.num_key_value_heads == 8  # the original is untouched


@torch.no_grad()
def test_pooling_to_the_same_head_count_changes_nothing(mha_model):
    model = mha_model()
    torch.testing.assert_close(mean_pool_kv_heads(model, 8)(ids()), model(ids()))


def test_pooling_a_gqa_model_further_groups_consecutive_heads(mha_model):
    model = mean_pool_kv_heads(mha_model(), 4)
    twice = mean_pool_kv_heads(model, 1)
    once = mean_pool_kv_heads(mha_model(), 1)
    torch.testing.assert_close(twice(ids()), once(ids()), atol=ATOL, rtol=0)


@pytest.mark.parametrize("bad", [0, 3, 16, -2])
def test_head_count_must_divide(bad, mha_model):
    with pytest.raises(ValueError, match=r"must divide the model's 8 key/value heads.*1, 2, 4, 8"):
        mean_pool_kv_heads(mha_model(), bad)


def test_uptrain_rejects_zero_steps(mha_model):
    with pytest.raises(ValueError, match="steps must be >= 1, got 0"):
        uptrain(mha_model(), torch.arange(100) % 64, steps=0)


@pytest.mark.parametrize("num_kv_heads", [1, 2, 4, 8])
def test_shared_and_repeated_kv_attention_match_sdpa(num_kv_heads):
    g = torch.Generator().manual_seed(num_kv_heads)
    q = torch.randn(3, 8, 1, 16, generator=g)
    k, v = torch.randn(2, 3, num_kv_heads, 20, 16, generator=g)
    group = 8 // num_kv_heads
    expected = F.scaled_dot_product_attention(q, repeat_kv(k, group), repeat_kv(v, group))
    torch.testing.assert_close(shared_kv_attention(q, k, v), expected, atol=ATOL, rtol=1e-5)
    torch.testing.assert_close(repeated_kv_attention(q, k, v), expected, atol=ATOL, rtol=1e-5)


def test_repeat_kv_gives_each_query_head_its_groups_head():
    k = torch.arange(2.0).view(1, 2, 1, 1)
    assert repeat_kv(k, 3).flatten().tolist() == [0, 0, 0, 1, 1, 1]


def test_committed_mha_checkpoint_is_small_and_multi_head():
    model, _ = load(MHA_DIR, "cpu")
    assert model.config.num_key_value_heads == model.config.num_attention_heads == 8
    size = sum(f.stat().st_size for f in MHA_DIR.iterdir())
    assert size < 3 * 2**20


@pytest.mark.slow
def test_committed_mha_checkpoint_gives_its_recorded_heldout_loss():
    record = json.loads((MHA_DIR / "training.json").read_text())
    model, tokenizer = load(MHA_DIR, "cpu")
    heldout = token_stream(tokenizer, corpus.heldout_documents())
    loss = evaluate(model, heldout, record["schedule"]["seq_len"])
    assert loss == pytest.approx(record["heldout_loss"], abs=1e-4)
    assert record["parameters"] == model.num_parameters()


@pytest.mark.slow
def test_uptraining_a_pooled_checkpoint_lowers_its_heldout_loss():
    model, tokenizer = load(MHA_DIR, "cpu")
    train = token_stream(tokenizer, corpus.train_documents(300))
    heldout = token_stream(tokenizer, corpus.heldout_documents(30))
    mqa = mean_pool_kv_heads(model, 1)
    before = evaluate(mqa, heldout, 128)
    losses = uptrain(mqa, train, steps=15, batch_size=4, seq_len=64, seed=0)
    after = evaluate(mqa, heldout, 128)
    assert len(losses) == 15
    assert after < before - 0.02
    # Seeded: the same run again gives the same losses.
    again = mean_pool_kv_heads(model, 1)
    assert uptrain(again, train, steps=15, batch_size=4, seq_len=64, seed=0) == losses
