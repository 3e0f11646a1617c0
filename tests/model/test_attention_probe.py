"""The probe reads the attention the model really computes, and leaves the model unchanged."""

import pytest
import torch

from llmserve_ref.device import get_device
from llmserve_ref.kernels.grouped_attention import grouped_attention
from llmserve_ref.model.attention_probe import attention_weights, capture_qkv
from llmserve_ref.model.weights import load_target


@pytest.fixture(scope="module")
def target():
    return load_target(get_device())


@pytest.fixture(scope="module")
def ids(target):
    _, tokenizer = target
    text = "Once upon a time, there was a curious fox named Leo. Leo found a red ball."
    return torch.tensor([tokenizer.encode(text, add_bos=True)])


@pytest.mark.parametrize("layer", [0, 3])
def test_weights_times_values_give_back_the_modules_output(target, ids, layer):
    model, _ = target
    qkv = capture_qkv(model, ids, layer)
    weights = attention_weights(qkv.q, qkv.k)
    group = qkv.q.shape[1] // qkv.k.shape[1]
    per_head = weights @ qkv.v.repeat_interleave(group, dim=1)  # [1, heads, T, d]
    attn = model.model["layers"][layer].self_attn
    output = attn.o_proj(per_head.transpose(1, 2).flatten(2))
    torch.testing.assert_close(output, qkv.output, rtol=1e-4, atol=1e-5)


def test_weights_agree_with_grouped_attention_and_sdpa(target, ids):
    model, _ = target
    qkv = capture_qkv(model, ids, layer=1)
    group = qkv.q.shape[1] // qkv.k.shape[1]
    k, v = (t.repeat_interleave(group, dim=1) for t in (qkv.k, qkv.v))
    expected = torch.nn.functional.scaled_dot_product_attention(qkv.q, k, v, is_causal=True)
    ours = attention_weights(qkv.q, qkv.k) @ v
    torch.testing.assert_close(ours, expected, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(
        grouped_attention(qkv.q, qkv.k, qkv.v, qkv.positions), expected, rtol=1e-4, atol=1e-5
    )


def test_weights_are_causal_distributions(target, ids):
    model, _ = target
    qkv = capture_qkv(model, ids, layer=2)
    weights = attention_weights(qkv.q, qkv.k)
    T = ids.shape[1]
    assert weights.shape == (1, model.config.num_attention_heads, T, T)
    future = torch.ones(T, T, dtype=torch.bool, device=weights.device).triu(1)
    assert torch.all(weights[..., future] == 0)
    assert torch.all(weights[..., ~future] > 0)
    torch.testing.assert_close(weights.sum(-1), torch.ones_like(weights.sum(-1)))


def test_last_query_alone_against_all_keys_is_the_last_row(target, ids):
    model, _ = target
    qkv = capture_qkv(model, ids, layer=0)
    full = attention_weights(qkv.q, qkv.k)
    last = attention_weights(qkv.q[:, :, -1:], qkv.k)  # positions default to the last one
    torch.testing.assert_close(last[:, :, 0], full[:, :, -1])


def test_probing_leaves_the_model_unchanged(target, ids):
    model, _ = target
    with torch.inference_mode():
        before = model(ids.to(model.device))
        capture_qkv(model, ids, layer=1)
        after = model(ids.to(model.device))
    assert torch.equal(before, after)
    attn = model.model["layers"][1].self_attn
    assert not attn._forward_hooks and not attn._forward_pre_hooks


def test_bad_input_says_what_to_do(tiny_llama):
    model = tiny_llama()
    with pytest.raises(ValueError, match=r"layer must be in 0\.\.1"):
        capture_qkv(model, torch.tensor([[1, 2]]), layer=2)
    with pytest.raises(ValueError, match=r"must be \[batch, T\]"):
        capture_qkv(model, torch.tensor([1, 2]), layer=0)
    with pytest.raises(ValueError, match="cannot share"):
        attention_weights(torch.zeros(1, 3, 2, 4), torch.zeros(1, 2, 2, 4))
